#include "idemproxy/ops/logging.hpp"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <nlohmann/json.hpp>

namespace idemproxy::ops {
namespace {

bool g_json = false;

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

// JSON event lines: {"ts":..,"level":..,"msg":..} with the message properly escaped.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const nlohmann::json line = {
        {"ts", utc_now()},
        {"level", std::string(spdlog::level::to_string_view(msg.level).data(),
                              spdlog::level::to_string_view(msg.level).size())},
        {"msg", std::string(msg.payload.data(), msg.payload.size())}};
    const std::string text =
        line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    dest.append(text.data(), text.data() + text.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

std::shared_ptr<spdlog::logger> access_logger() {
  static auto logger = [] {
    auto l = std::make_shared<spdlog::logger>("access",
                                              std::make_shared<spdlog::sinks::stdout_sink_mt>());
    l->set_pattern("%v");
    return l;
  }();
  return logger;
}

}  // namespace

void configure_logging(const std::string& level, const std::string& format) {
  g_json = format == "json";
  spdlog::set_level(spdlog::level::from_str(level));
  if (g_json) spdlog::set_formatter(std::make_unique<JsonFormatter>());
  access_logger()->set_level(spdlog::level::from_str(level));
}

void log_access(const AccessRecord& r) {
  auto logger = access_logger();
  if (!logger->should_log(spdlog::level::info)) return;
  if (g_json) {
    nlohmann::json line = {{"ts", utc_now()},
                           {"level", "info"},
                           {"msg", "request"},
                           {"request_id", r.request_id},
                           {"peer", r.peer},
                           {"method", r.method},
                           {"target", r.target},
                           {"route", r.route},
                           {"outcome", r.outcome},
                           {"status", r.status},
                           {"upstream_status", r.upstream_status},
                           {"key_hash", r.key_hash},
                           {"duration_ms", r.duration_ms},
                           {"upstream_ms", r.upstream_ms}};
    logger->info(line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  logger->info(
      "{} [access] {} {} route={} outcome={} status={} upstream_status={} key={} ms={:.2f} "
      "upstream_ms={:.2f} request_id={} peer={}",
      utc_now(), r.method, r.target, r.route, r.outcome, r.status, r.upstream_status,
      r.key_hash.empty() ? "-" : r.key_hash, r.duration_ms, r.upstream_ms, r.request_id, r.peer);
}

}  // namespace idemproxy::ops
