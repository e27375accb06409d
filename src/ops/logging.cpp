#include "idemproxy/ops/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

namespace idemproxy::ops {
namespace {

bool g_json = false;
thread_local const std::string* t_trace_id = nullptr;

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[40];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof out, "%s.%03dZ", buf, static_cast<int>(ms));
  return out;
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

const std::shared_ptr<spdlog::logger>& access_logger() {
  static auto logger = [] {
    auto l = std::make_shared<spdlog::logger>("access",
                                              std::make_shared<spdlog::sinks::stdout_sink_mt>());
    l->set_pattern("%v");
    return l;
  }();
  return logger;
}

}  // namespace

TraceTag::TraceTag(const std::string& trace_id) : previous_(t_trace_id) {
  t_trace_id = trace_id.empty() ? nullptr : &trace_id;
}

TraceTag::~TraceTag() { t_trace_id = previous_; }

void configure_logging(const std::string& level, const std::string& format) {
  g_json = format == "json";
  spdlog::set_level(spdlog::level::from_str(level));
  spdlog::set_formatter(std::make_unique<LineFormatter>(g_json));
  access_logger()->set_level(spdlog::level::from_str(level));
}

bool access_log_enabled() { return access_logger()->should_log(spdlog::level::info); }

void log_access(const AccessRecord& r) {
  if (!access_log_enabled()) return;
  const auto& logger = access_logger();
  if (g_json) {
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
    logger->info(dump(line));
    return;
  }
  logger->info(
      "{} info [access] {} {} route={} outcome={} status={} upstream_status={} key={} ms={:.3f} "
      "upstream_ms={:.3f} request_id={} peer={} trace_id={}{}{}",
      utc_now(), r.method, r.target, r.route, r.outcome, r.status, r.upstream_status,
      r.key_hash.empty() ? "-" : r.key_hash, r.duration_ms, r.upstream_ms, r.request_id, r.peer,
      r.trace_id.empty() ? "-" : r.trace_id,
      r.original_trace_id.empty() ? "" : " original_trace_id=", r.original_trace_id);
}

}  // namespace idemproxy::ops
