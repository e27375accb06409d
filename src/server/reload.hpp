#pragma once
// Reloading the config file (SIGHUP, POST /admin/reload), and the gauges the
// running server publishes beside the metrics it counts.
#include <optional>
#include <string>

#include "idemproxy/trace/tracing.hpp"
#include "proxy/policy_document.hpp"
#include "server/http_names.hpp"
#include "server/server_runtime.hpp"

namespace idemproxy::server {

/// Reads the config file again and swaps the settings in; restart-only keys keep
/// their running values (with a warning naming them). Returns the error when the
/// file is rejected, and the running configuration stays in force.
std::optional<std::string> reload_config(ServerRuntime& runtime, trace::Tracing* tracing);

/// Registers the gauges sampled at each /metrics scrape: the store's own, the
/// replay cache, the waiting keys and the completions pending.
void publish_gauges(ServerRuntime& runtime);

}  // namespace idemproxy::server
