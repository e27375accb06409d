#pragma once
// Internal to the config loader: the tracing section.
#include <yaml-cpp/yaml.h>

#include "config/reader.hpp"

namespace idemproxy::config::detail {

/// tracing: OpenTelemetry export over OTLP/HTTP; absent or without otlp_endpoint, off.
void read_tracing(const YAML::Node& root, const Reader& r, Config& c);

}  // namespace idemproxy::config::detail
