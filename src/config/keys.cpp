// Every configuration key, in one table: the schema the loader enforces (unknown
// keys are errors), the list the README reference is checked against
// (documented_keys), and which keys a reload cannot change (restart-only).
#include <map>
#include <set>
#include <string>
#include <vector>

#include "config/reader.hpp"

namespace idemproxy::config {
namespace {

std::string render(const std::string& s) { return s; }
std::string render(Duration d) { return std::to_string(d.count()) + "ms"; }
std::string render(std::chrono::microseconds d) { return std::to_string(d.count()) + "us"; }
std::string render(std::size_t n) { return std::to_string(n); }
std::string render(int n) { return std::to_string(n); }
std::string render(bool b) { return b ? "true" : "false"; }
std::string render(std::optional<bool> b) { return b ? render(*b) : "detect"; }
std::string render(const Endpoint& e) { return e.host + ":" + std::to_string(e.port); }
std::string render(UpstreamConfig::Protocol p) {
  switch (p) {
    case UpstreamConfig::Protocol::h2c:
      return "h2c";
    case UpstreamConfig::Protocol::h2:
      return "h2";
    case UpstreamConfig::Protocol::automatic:
      return "auto";
    case UpstreamConfig::Protocol::http1:
      break;
  }
  return "http1";
}
std::string render(const std::map<std::string, std::string>& m) {
  std::string out;
  for (const auto& [name, value] : m) out += name + ": " + value + "\n";
  return out;
}
std::string render(StoreConfig::Kind k) {
  return k == StoreConfig::Kind::memory ? "memory" : "postgres";
}

struct Key {
  const char* section;  // "" is the top level; "route_policy" and "route" are per route
  const char* name;
  /// Restart-only keys: the running value, to compare on reload, and how to keep it.
  std::string (*value)(const Config&) = nullptr;
  void (*keep)(Config& next, const Config& running) = nullptr;
};

// A key the running process was built from (sockets, pools, the store, TLS
// contexts): a reload keeps its running value.
#define IDEMPROXY_RESTART(section, name, member)                                  \
  Key {                                                                           \
    section, name, [](const Config& c) { return render(c.member); },              \
        [](Config& next, const Config& running) { next.member = running.member; } \
  }

const std::vector<Key>& table() {
  static const std::vector<Key> keys = {
      IDEMPROXY_RESTART("", "listen", listen),
      IDEMPROXY_RESTART("", "admin_listen", admin_listen),
      {"", "admin_token"},
      {"", "scope_key"},
      {"", "upstream"},
      {"", "store"},
      {"", "defaults"},
      {"", "routes"},
      {"", "server"},
      {"", "log"},
      {"", "gc"},
      {"", "tls"},
      {"", "replay_cache"},
      IDEMPROXY_RESTART("replay_cache", "max_bytes", replay_cache_bytes),
      // The URL and what is derived from it (host, port, base path, https) go together.
      Key{"upstream", "url", [](const Config& c) { return c.upstream.url; },
          [](Config& next, const Config& running) {
            next.upstream.url = running.upstream.url;
            next.upstream.host = running.upstream.host;
            next.upstream.port = running.upstream.port;
            next.upstream.base_path = running.upstream.base_path;
            next.upstream.tls.enabled = running.upstream.tls.enabled;
          }},
      IDEMPROXY_RESTART("upstream", "connect_timeout", upstream.connect_timeout),
      IDEMPROXY_RESTART("upstream", "timeout", upstream.timeout),
      IDEMPROXY_RESTART("upstream", "read_timeout", upstream.read_timeout),
      IDEMPROXY_RESTART("upstream", "stream_timeout", upstream.stream_timeout),
      IDEMPROXY_RESTART("upstream", "max_idle_connections", upstream.max_idle_connections),
      IDEMPROXY_RESTART("upstream", "max_response_size", upstream.max_response_size),
      IDEMPROXY_RESTART("upstream", "protocol", upstream.protocol),
      IDEMPROXY_RESTART("upstream", "http2_max_streams", upstream.http2_max_streams),
      IDEMPROXY_RESTART("upstream", "idle_timeout", upstream.idle_timeout),
      {"upstream", "tls"},
      IDEMPROXY_RESTART("upstream.tls", "ca_file", upstream.tls.ca_file),
      IDEMPROXY_RESTART("upstream.tls", "server_name", upstream.tls.server_name),
      IDEMPROXY_RESTART("upstream.tls", "insecure_skip_verify", upstream.tls.insecure_skip_verify),
      IDEMPROXY_RESTART("tls", "cert_file", tls.cert_file),
      IDEMPROXY_RESTART("tls", "key_file", tls.key_file),
      IDEMPROXY_RESTART("tls", "client_ca_file", tls.client_ca_file),
      {"store", "postgres"},
      IDEMPROXY_RESTART("store", "memory", store.kind),
      {"store", "encryption"},
      IDEMPROXY_RESTART("store.encryption", "key_file", store.encryption_key_file),
      IDEMPROXY_RESTART("store.postgres", "dsn", store.dsn),
      IDEMPROXY_RESTART("store.postgres", "pool_size", store.pool_size),
      IDEMPROXY_RESTART("store.postgres", "batch_max", store.batch_max),
      IDEMPROXY_RESTART("store.postgres", "batch_wait", store.batch_wait),
      IDEMPROXY_RESTART("store.postgres", "statement_timeout", store.statement_timeout),
      IDEMPROXY_RESTART("store.postgres", "transaction_pooling", store.transaction_pooling),
      IDEMPROXY_RESTART("store.postgres", "defer_chunk_flush", store.defer_chunk_flush),
      IDEMPROXY_RESTART("store.postgres", "citus", store.citus),
      IDEMPROXY_RESTART("server", "threads", server.threads),
      {"server", "drain_timeout"},
      {"server", "idle_timeout"},
      {"server", "header_timeout"},
      {"server", "read_timeout"},
      {"server", "max_header_size"},
      {"server", "max_stream_body"},
      IDEMPROXY_RESTART("server", "max_unstored", server.max_unstored),
      {"server", "max_connections"},
      {"server", "max_header_fields"},
      {"server", "body_timeout"},
      {"server", "merge_slashes"},
      {"server", "escaped_slashes"},
      {"server", "max_json_depth"},
      {"server", "http2"},
      {"", "policy"},
      {"policy", "path"},
      {"policy", "url"},
      {"gc", "interval"},
      {"gc", "batch_size"},
      {"gc", "max_batches"},
      {"log", "level"},
      {"log", "format"},
      IDEMPROXY_RESTART("log", "access_buffer", log_access_buffer),
      IDEMPROXY_RESTART("log", "access_flush", log_access_flush),
      {"", "tracing"},
      // The exporter thread is built from these; only sample_ratio is reloadable.
      Key{"tracing", "otlp_endpoint", [](const Config& c) { return c.tracing.otlp_endpoint; },
          [](Config& next, const Config& running) {
            next.tracing.otlp_endpoint = running.tracing.otlp_endpoint;
            next.tracing.tls = running.tracing.tls;
            next.tracing.host = running.tracing.host;
            next.tracing.port = running.tracing.port;
            next.tracing.target = running.tracing.target;
          }},
      IDEMPROXY_RESTART("tracing", "service_name", tracing.service_name),
      {"tracing", "sample_ratio"},
      IDEMPROXY_RESTART("tracing", "headers", tracing.headers),
      IDEMPROXY_RESTART("tracing", "timeout", tracing.timeout),
      IDEMPROXY_RESTART("tracing", "batch_delay", tracing.batch_delay),
      IDEMPROXY_RESTART("tracing", "max_queue", tracing.max_queue),
      IDEMPROXY_RESTART("tracing", "max_batch", tracing.max_batch),
      {"route_policy", "header"},
      {"route_policy", "methods"},
      {"route_policy", "key_required"},
      {"route_policy", "ttl"},
      {"route_policy", "max_ttl"},
      {"route_policy", "lease"},
      {"route_policy", "scope_header"},
      {"route_policy", "on_concurrent"},
      {"route_policy", "store_status"},
      {"route_policy", "store_grpc_status"},
      {"route_policy", "store_unavailable"},
      {"route_policy", "max_body"},
      {"route_policy", "max_stored_answer"},
      {"route_policy", "store_deny_headers"},
      {"route_policy", "forward_fencing_token"},
      {"route_policy", "namespace"},
      {"route_policy", "key_json_pointer"},
      {"route_policy", "statuses"},
      {"route_policy", "fingerprint"},
      {"fingerprint", "json_include"},
      {"fingerprint", "json_exclude"},
      {"fingerprint", "query"},
      {"fingerprint", "headers"},
      {"route_policy", "quota"},
      {"quota", "records"},
      {"quota", "bytes"},
      {"quota", "in_flight"},
      {"route_policy", "after_expiry"},
      {"route_policy", "tombstone_ttl"},
      {"route_policy", "max_key_age"},
      {"statuses", "missing_key"},
      {"statuses", "mismatch"},
      {"statuses", "in_flight"},
      {"statuses", "store_unavailable"},
      {"statuses", "expired"},
      {"route_policy", "on_stale"},
      {"route_policy", "mode"},
      {"route_policy", "scope"},
      {"scope", "from"},
      {"scope", "header"},
      {"scope", "hash"},
      {"route", "name"},
      {"route", "path_prefix"},
      {"route", "enabled"},
      {"route", "case_sensitive"},
  };
  return keys;
}

#undef IDEMPROXY_RESTART

}  // namespace

namespace detail {

const std::map<std::string, std::set<std::string>>& schema() {
  static const std::map<std::string, std::set<std::string>> sections = [] {
    std::map<std::string, std::set<std::string>> s;
    for (const Key& k : table()) s[k.section].insert(k.name);
    return s;
  }();
  return sections;
}

const std::set<std::string>& section(const std::string& name) { return schema().at(name); }

}  // namespace detail

std::vector<std::string> documented_keys() {
  const auto& sections = detail::schema();
  std::vector<std::string> keys;
  for (const Key& k : table()) {
    const std::string section = k.section;
    const std::string path = section.empty() || section == "route_policy" || section == "route"
                                 ? k.name
                                 : section + "." + k.name;
    if (!sections.contains(path)) keys.push_back(path);  // sections hold documented keys
  }
  return keys;
}

std::vector<std::string> restart_only_changes(const Config& running, const Config& next) {
  std::vector<std::string> changed;
  for (const Key& k : table()) {
    if (k.value && k.value(running) != k.value(next)) {
      changed.push_back(std::string(k.section).empty() ? k.name
                                                       : std::string(k.section) + "." + k.name);
    }
  }
  return changed;
}

void keep_restart_only(Config& next, const Config& running) {
  for (const Key& k : table()) {
    if (k.keep) k.keep(next, running);
  }
}

}  // namespace idemproxy::config
