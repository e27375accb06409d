#pragma once
// The readers of the configuration's sections, which parse_config (loader.cpp) runs
// in this order over the document's root: read_routes needs tls, store and scope_key
// read first.
#include <yaml-cpp/yaml.h>

#include "config/reader.hpp"
#include "idemproxy/config/config.hpp"

namespace idemproxy::config::detail {

/// upstream: the protected service and how it is reached.
void read_upstream(const YAML::Node& root, const Reader& r, Config& c);
/// tls: TLS for clients (mTLS with client_ca_file).
void read_tls(const YAML::Node& root, const Reader& r, Config& c);
/// store: PostgreSQL or memory, and encryption at rest.
void read_store(const YAML::Node& root, const Reader& r, Config& c);
/// server: threads, timeouts and limits of the client side.
void read_server(const YAML::Node& root, const Reader& r, Config& c);
/// policy, replay_cache, gc and log.
void read_housekeeping(const YAML::Node& root, const Reader& r, Config& c);
/// defaults and routes.
void read_routes(const YAML::Node& root, const Reader& r, Config& c);

}  // namespace idemproxy::config::detail
