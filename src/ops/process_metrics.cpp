#include "ops/process_metrics.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace idemproxy::ops {
namespace {

struct ProcStat {
  double utime_ticks = 0;
  double stime_ticks = 0;
  double start_ticks = 0;  // since boot
  double vsize_bytes = 0;
  double rss_pages = 0;
};

// proc(5), /proc/[pid]/stat: the second field, (comm), may hold spaces, so fields
// are counted from the last ')'. utime is field 14, stime 15, starttime 22,
// vsize 23, rss 24.
bool read_stat(ProcStat& s) {
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 2));
  std::string f;
  for (int field = 3; fields >> f; ++field) {
    if (field == 14) s.utime_ticks = std::stod(f);
    if (field == 15) s.stime_ticks = std::stod(f);
    if (field == 22) s.start_ticks = std::stod(f);
    if (field == 23) s.vsize_bytes = std::stod(f);
    if (field == 24) {
      s.rss_pages = std::stod(f);
      return true;
    }
  }
  return false;
}

// The boot time, in seconds since the epoch (proc(5), /proc/stat "btime").
double boot_time() {
  std::ifstream in("/proc/stat");
  std::string name;
  double value = 0;
  while (in >> name) {
    if (name == "btime" && in >> value) return value;
    in.ignore(1 << 16, '\n');
  }
  return 0;
}

double open_fds() {
  std::error_code ec;
  double n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return n > 0 ? n - 1 : 0;  // less the descriptor that lists the folder
}

void family(std::ostream& out, const char* name, const char* type, const char* help, double value) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n"
      << name << " " << std::fixed << value << std::defaultfloat << "\n";
}

}  // namespace

void render_process_metrics(std::ostream& out) {
  ProcStat s;
  if (!read_stat(s)) return;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  family(out, "process_cpu_seconds_total", "counter",
         "Total user and system CPU time spent in seconds.",
         (s.utime_ticks + s.stime_ticks) / ticks);
  family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
         s.rss_pages * page);
  family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
         s.vsize_bytes);
  family(out, "process_start_time_seconds", "gauge",
         "Start time of the process since unix epoch in seconds.",
         boot_time() + s.start_ticks / ticks);
  family(out, "process_open_fds", "gauge", "Number of open file descriptors.", open_fds());
  rlimit files{};
  if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
    family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.",
           files.rlim_cur == RLIM_INFINITY ? -1.0 : static_cast<double>(files.rlim_cur));
  }
}

}  // namespace idemproxy::ops
