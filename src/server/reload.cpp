#include "server/reload.hpp"

#include <spdlog/spdlog.h>

#include "idemproxy/ops/logging.hpp"

namespace idemproxy::server {

std::optional<std::string> reload_config(ServerRuntime& runtime, trace::Tracing* tracing) {
  const auto current = runtime.settings();
  try {
    config::Config next = config::load_config(current->config.path);
    for (const auto& w : next.warnings) spdlog::warn("reload: {}", w);
    const auto changed = config::restart_only_changes(current->config, next);
    if (!changed.empty()) {
      std::string names;
      for (const auto& n : changed) names += (names.empty() ? "" : ", ") + n;
      spdlog::warn(
          "reload: {} changed, which takes effect only after a restart; keeping the running "
          "values of every restart-only key",
          names);
      config::keep_restart_only(next, current->config);
    }
    if (tracing != nullptr) tracing->reload(next.tracing);
    ops::configure_logging(next.log_level, next.log_format);
    runtime.replace_settings(proxy::make_settings(std::move(next)));
    runtime.metrics.count_reload(true);
    spdlog::info("reload: configuration reloaded from {}", current->config.path);
    return std::nullopt;
  } catch (const std::exception& e) {
    runtime.metrics.count_reload(false);
    spdlog::error("reload rejected, the previous configuration stays in force: {}", e.what());
    return std::string(e.what());
  }
}

void publish_gauges(ServerRuntime& runtime) {
  runtime.metrics.set_gauges([&runtime] {
    std::vector<ops::GaugeSample> samples;
    for (const auto& s : runtime.record_store.stats()) {
      samples.push_back({s.name, s.help, s.value, s.counter ? "counter" : "gauge"});
    }
    const std::vector<ops::GaugeSample> own{
        {"idemproxy_replay_cache_bytes", "Bytes held by the replay cache.",
         static_cast<double>(runtime.cache.bytes())},
        {"idemproxy_replay_cache_max_bytes", "The replay cache's bound (replay_cache.max_bytes).",
         static_cast<double>(runtime.cache.max_bytes())},
        {"idemproxy_replay_cache_entries", "Completed records held by the replay cache.",
         static_cast<double>(runtime.cache.size())},
        {"idemproxy_waiting_keys",
         "Keys held by this process that have requests waiting on them (on_concurrent: wait).",
         static_cast<double>(runtime.coordinator.waiting_keys())},
        {"idemproxy_completions_pending",
         "Completions waiting for the store to come back, retried in the background.",
         static_cast<double>(runtime.completions.pending())}};
    samples.insert(samples.end(), own.begin(), own.end());
    return samples;
  });
}

}  // namespace idemproxy::server
