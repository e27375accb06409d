#include "idemproxy/ops/logging.hpp"

#include <spdlog/details/console_globals.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

namespace idemproxy::ops {
namespace {

std::atomic<bool> g_json = false;  // log.format is json; reload may change it
thread_local const std::string* t_trace_id = nullptr;

constexpr std::size_t kStampSize = 24;  // 2026-11-27T08:33:00.123Z

// The time now, as UTC with milliseconds, into `out`. The date and time of day are
// formatted once a second per thread (nginx caches its log time the same way):
// strftime and snprintf per line were a tenth of the access line's cost.
void write_utc_now(char (&out)[kStampSize]) {
  thread_local std::time_t cached_second = -1;
  thread_local char cached[20];  // YYYY-MM-DDTHH:MM:SS and its terminator
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  if (secs != cached_second) {
    std::tm tm{};
    gmtime_r(&secs, &tm);
    std::strftime(cached, sizeof cached, "%Y-%m-%dT%H:%M:%S", &tm);
    cached_second = secs;
  }
  std::memcpy(out, cached, 19);
  out[19] = '.';
  out[20] = static_cast<char>('0' + ms / 100);
  out[21] = static_cast<char>('0' + ms / 10 % 10);
  out[22] = static_cast<char>('0' + ms % 10);
  out[23] = 'Z';
}

std::string utc_now() {
  char out[kStampSize];
  write_utc_now(out);
  return {out, kStampSize};
}

// The config's level names: spdlog says "warning" where `log.level` says warn.
const char* level_name(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace:
      return "trace";
    case spdlog::level::debug:
      return "debug";
    case spdlog::level::info:
      return "info";
    case spdlog::level::warn:
      return "warn";
    case spdlog::level::err:
      return "error";
    case spdlog::level::critical:
      return "critical";
    default:
      return "off";
  }
}

// Milliseconds to the microsecond: no binary-fraction noise (0.30000000000000004).
double round_ms(double ms) { return std::round(ms * 1000) / 1000; }

std::string dump(const nlohmann::json& line) {
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Event lines: TIME LEVEL MESSAGE [trace_id=...], or {"ts","level","msg","trace_id"}.
class LineFormatter final : public spdlog::formatter {
 public:
  explicit LineFormatter(bool json) : json_(json) {}
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const std::string_view text(msg.payload.data(), msg.payload.size());
    std::string line;
    if (json_) {
      nlohmann::json j = {
          {"ts", utc_now()}, {"level", level_name(msg.level)}, {"msg", std::string(text)}};
      if (t_trace_id != nullptr) j["trace_id"] = *t_trace_id;
      line = dump(j);
    } else {
      line = utc_now() + " " + level_name(msg.level) + " " + std::string(text);
      if (t_trace_id != nullptr) line += " trace_id=" + *t_trace_id;
    }
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<LineFormatter>(json_);
  }

 private:
  bool json_;
};

void append_number(std::string& out, unsigned long long n) {
  char digits[20];
  const auto end = std::to_chars(digits, digits + sizeof digits, n).ptr;
  out.append(digits, end);
}

// Milliseconds with three decimals, as "{:.3f}" wrote them (to the microsecond,
// rounded half away from zero).
void append_ms(std::string& out, double ms) {
  const auto us = static_cast<unsigned long long>(std::llround(std::max(ms, 0.0) * 1000));
  append_number(out, us / 1000);
  const auto frac = static_cast<unsigned>(us % 1000);
  const char decimals[] = {'.', static_cast<char>('0' + frac / 100),
                           static_cast<char>('0' + frac / 10 % 10),
                           static_cast<char>('0' + frac % 10)};
  out.append(decimals, sizeof decimals);
}

// Bytes to standard output with one write(2) per call, under the mutex every stdout
// sink of spdlog's shares (their lines are flushed as they are written, so nothing
// of theirs waits in stdout's buffer to be overtaken).
void write_out(std::string_view text) {
  const std::lock_guard lock(spdlog::details::console_mutex::mutex());
  while (!text.empty()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stdout closed or full: the lines are lost, the requests are not
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

// The access lines not yet written: one bounded buffer, shared by every thread so the
// lines keep the order they ended in, written when the next line would not fit, by a
// flusher thread every `flush`, and at a clean exit (nginx's `access_log ... buffer=
// flush=`). A write per line was over half of a line's cost.
class AccessBuffer {
 public:
  AccessBuffer(std::size_t capacity, std::chrono::milliseconds flush)
      : capacity_(capacity), flush_(flush) {
    pending_.reserve(capacity_);
    if (capacity_ > 0) flusher_ = std::thread([this] { run(); });
  }
  ~AccessBuffer() { stop(); }
  AccessBuffer(const AccessBuffer&) = delete;
  AccessBuffer& operator=(const AccessBuffer&) = delete;

  void add(std::string_view line) {
    if (capacity_ == 0) return write_out(line);
    const std::lock_guard lock(m_);
    if (pending_.size() + line.size() > capacity_) {
      write_held();
      if (line.size() > capacity_) return write_out(line);
    }
    pending_.append(line);
  }

  void flush() {
    const std::lock_guard lock(m_);
    write_held();
  }

  void stop() {
    {
      const std::lock_guard lock(m_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (flusher_.joinable()) flusher_.join();
    flush();
  }

 private:
  void run() {
    std::unique_lock lock(m_);
    while (!stopping_) {
      wake_.wait_for(lock, flush_);
      write_held();
    }
  }

  // Under m_.
  void write_held() {
    if (pending_.empty()) return;
    write_out(pending_);
    pending_.clear();
  }

  const std::size_t capacity_;
  const std::chrono::milliseconds flush_;
  std::mutex m_;
  std::condition_variable wake_;
  std::string pending_;
  bool stopping_ = false;
  std::thread flusher_;
};

// Made by configure_access_log, after spdlog's console mutex, so that it is destroyed
// (flushed) before that mutex is.
std::unique_ptr<AccessBuffer>& access_buffer() {
  spdlog::details::console_mutex::mutex();
  static std::unique_ptr<AccessBuffer> buffer;
  return buffer;
}

void write_line(std::string_view line) {
  if (auto& buffer = access_buffer()) return buffer->add(line);
  write_out(line);
}

// Whether the access log writes: `log.level` at info or below.
std::atomic<bool> g_access = true;

}  // namespace

TraceTag::TraceTag(const std::string& trace_id) : previous_(t_trace_id) {
  t_trace_id = trace_id.empty() ? nullptr : &trace_id;
}

TraceTag::~TraceTag() { t_trace_id = previous_; }

void configure_logging(const std::string& level, const std::string& format) {
  g_json.store(format == "json", std::memory_order_relaxed);
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_formatter(std::make_unique<LineFormatter>(format == "json"));
  g_access = spdlog::level::from_str(level) <= spdlog::level::info;
}

bool access_log_enabled() { return g_access.load(std::memory_order_relaxed); }

void configure_access_log(std::size_t buffer_bytes, std::chrono::milliseconds flush) {
  auto& buffer = access_buffer();
  if (buffer) buffer->stop();
  buffer = std::make_unique<AccessBuffer>(buffer_bytes, flush);
}

void flush_access_log() {
  if (const auto& buffer = access_buffer()) buffer->flush();
}

void log_access(const AccessRecord& r) {
  if (!access_log_enabled()) return;
  if (g_json.load(std::memory_order_relaxed)) {
    nlohmann::json line = {{"ts", utc_now()},
                           {"level", "info"},
                           {"msg", "request"},
                           {"request_id", r.request_id},
                           {"trace_id", r.trace_id},
                           {"peer", r.peer},
                           {"method", r.method},
                           {"target", r.target},
                           {"route", r.route},
                           {"outcome", r.outcome},
                           {"status", r.status},
                           {"upstream_status", r.upstream_status},
                           {"key_hash", r.key_hash},
                           {"duration_ms", round_ms(r.duration_ms)},
                           {"upstream_ms", round_ms(r.upstream_ms)}};
    if (!r.original_trace_id.empty()) line["original_trace_id"] = r.original_trace_id;
    std::string text = dump(line);
    text.push_back('\n');
    write_line(text);
    return;
  }
  // Built once, into a buffer each thread keeps (no heap call once it has grown), by
  // appends: fmt's run-time parse of a 14-field format was a third of the line's cost.
  thread_local std::string line;
  line.clear();
  char now[kStampSize];
  write_utc_now(now);
  line.append(now, kStampSize).append(" info [access] ");
  line.append(r.method).append(" ").append(r.target);
  line.append(" route=").append(r.route).append(" outcome=").append(r.outcome);
  line.append(" status=");
  append_number(line, r.status);
  line.append(" upstream_status=");
  append_number(line, r.upstream_status);
  line.append(" key=").append(r.key_hash.empty() ? "-" : r.key_hash);
  line.append(" ms=");
  append_ms(line, r.duration_ms);
  line.append(" upstream_ms=");
  append_ms(line, r.upstream_ms);
  line.append(" request_id=").append(r.request_id).append(" peer=").append(r.peer);
  line.append(" trace_id=").append(r.trace_id.empty() ? "-" : r.trace_id);
  if (!r.original_trace_id.empty()) line.append(" original_trace_id=").append(r.original_trace_id);
  line.push_back('\n');
  write_line(line);
}

}  // namespace idemproxy::ops
