#pragma once
// The YAML configuration, loaded and validated in one step.
#include <cstddef>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/engine/policy.hpp"

namespace idemproxy::config {

/// A configuration error at a place in the file; what() is "FILE:LINE:COL: message".
class ConfigError : public std::runtime_error {
 public:
  ConfigError(const std::string& file, int line, int column, const std::string& message);
  int line() const { return line_; }
  int column() const { return column_; }

 private:
  int line_;
  int column_;
};

struct Endpoint {
  std::string host;
  unsigned short port = 0;
};

/// Upstream https: certificate verification is on unless explicitly turned off.
struct UpstreamTls {
  bool enabled = false;     // the URL is https://
  std::string ca_file;      // empty: the system's trust store
  std::string server_name;  // SNI and the name verified; empty: the URL's host
  bool insecure_skip_verify = false;
};

/// Downstream TLS termination; mTLS when client_ca_file is set.
struct TlsConfig {
  std::string cert_file;  // PEM chain; empty: plain HTTP
  std::string key_file;
  std::string client_ca_file;  // set: every client must present a certificate it signed
  bool enabled() const { return !cert_file.empty(); }
};

struct UpstreamConfig {
  /// How requests reach the upstream: HTTP/1.1; HTTP/2 in cleartext with prior
  /// knowledge (RFC 9113 §3.3); HTTP/2 over TLS by ALPN; or whatever ALPN picks.
  enum class Protocol { http1, h2c, h2, automatic } protocol = Protocol::http1;
  std::string url;
  std::string host;
  std::string port;
  std::string base_path;  // the URL's path without a trailing slash; prefixed to targets
  Duration connect_timeout = std::chrono::seconds{2};
  Duration timeout = std::chrono::seconds{30};       // until the answer's head
  Duration read_timeout = std::chrono::seconds{30};  // between pieces of its body
  Duration stream_timeout{0};                        // the whole body; 0: unbounded
  std::size_t max_idle_connections = 64;
  std::size_t max_response_size = std::size_t{16} << 20;  // bodies read for storage
  std::size_t http2_max_streams = 100;               // concurrent requests on one HTTP/2 connection
  Duration idle_timeout = std::chrono::seconds{60};  // an HTTP/2 connection left without streams
  UpstreamTls tls;
};

struct StoreConfig {
  enum class Kind { postgres, memory } kind = Kind::postgres;
  std::string dsn;
  int pool_size = 8;
  Duration statement_timeout = std::chrono::seconds{5};
  bool transaction_pooling = false;  // a transaction-pooling PgBouncer is in the path
  // Chunk batches commit without waiting for the WAL's flush; the completion flushes.
  bool defer_chunk_flush = false;
  int batch_max = 64;  // claims and completions per group commit; 1: off
  // Most a batch waits for company (docs/PERFORMANCE.md, "Batches that stay full").
  std::chrono::microseconds batch_wait{1000};
  std::optional<bool> citus;        // records distributed by Citus; unset: detect
  std::string encryption_key_file;  // store.encryption.key_file; empty: stored in the clear
};

struct ServerConfig {
  int threads = 1;
  Duration drain_timeout = std::chrono::seconds{15};
  Duration idle_timeout = std::chrono::seconds{60};
  Duration header_timeout = std::chrono::seconds{10};  // first byte to complete head
  std::size_t max_connections = 10000;
  Duration read_timeout = std::chrono::seconds{30};
  std::size_t max_header_size = std::size_t{16} << 10;
  std::size_t max_stream_body = std::size_t{1} << 30;  // pass-through bodies
  std::size_t max_header_fields = 100;                 // as Apache httpd's LimitRequestFields
  Duration body_timeout = std::chrono::seconds{60};    // a whole pass-through request body
  bool merge_slashes = true;           // "//v1//orders" is routed and forwarded as "/v1/orders"
  bool reject_escaped_slashes = true;  // %2F, %5C and %00 in a path get 400
  std::size_t max_json_depth = 128;    // deeper JSON bodies are fingerprinted by their bytes
  bool http2 = true;  // h2c with prior knowledge and ALPN h2 on `listen` (RFC 9113 3.3, 3.2)
  // Answers held in memory while the store cannot take them: completions retried, and
  // the chunks of streams whose appends fail.
  std::size_t max_unstored = std::size_t{64} << 20;
};

/// The published idempotency policy (draft-ietf-httpapi-idempotency-key-header: the
/// resource MUST publish it, and errors SHOULD link to it).
struct PolicyDocConfig {
  std::string path = "/.well-known/idempotency";  // served on `listen`; "" serves none
  std::string url;  // an external document instead: Link points there, nothing is served
  /// What `Link: <...>; rel="describedby"` names: url, else path, else nothing.
  const std::string& target() const { return url.empty() ? path : url; }
};

/// In-process garbage collection of expired records.
struct GcConfig {
  // Capacity is batch_size * max_batches / interval rows/s: 100k/s by default, well
  // above the claim insert ceiling measured by bench/gc_throughput.sh (docs/RELIABILITY.md).
  Duration interval = std::chrono::seconds{10};  // 0 disables it
  int batch_size = 1000;
  int max_batches = 1000;  // per run; a run stops early at the first short batch
};

/// OpenTelemetry traces exported over OTLP/HTTP (JSON). Off when otlp_endpoint is
/// empty. sample_ratio is reloadable; every other key is restart-only (the exporter
/// thread and its connection are built from them).
struct TracingConfig {
  std::string otlp_endpoint;  // e.g. http://127.0.0.1:4318/v1/traces; empty: off
  std::string service_name = "idemproxy";
  double sample_ratio = 1.0;  // roots only: a traceparent's sampled flag is always followed
  std::map<std::string, std::string> headers;      // sent with each export (e.g. an API key)
  Duration timeout = std::chrono::seconds{10};     // one export request, connect to answer
  Duration batch_delay = std::chrono::seconds{5};  // the longest a span waits for its batch
  std::size_t max_queue = 2048;  // spans waiting for export; more are dropped and counted
  std::size_t max_batch = 512;   // spans per export request
  // Derived from otlp_endpoint.
  bool tls = false;  // https://
  std::string host;
  std::string port;
  std::string target;  // the path (and query), "/" when the URL has none
  bool enabled() const { return !otlp_endpoint.empty(); }
};

struct Config {
  std::string path;
  Endpoint listen{"127.0.0.1", 8080};
  Endpoint admin_listen{"127.0.0.1", 9090};
  std::string admin_token;  // bearer token for /admin/*; empty turns the admin API off
  std::string scope_key;    // HMAC key for scope: {from: authorization}
  std::size_t replay_cache_bytes = std::size_t{16} << 20;  // replay_cache.max_bytes; 0: off
  TlsConfig tls;
  UpstreamConfig upstream;
  StoreConfig store;
  ServerConfig server;
  GcConfig gc;
  PolicyDocConfig policy;
  TracingConfig tracing;
  std::string log_level = "info";
  std::string log_format = "text";                              // text | json
  std::size_t log_access_buffer = std::size_t{64} << 10;        // log.access_buffer; 0: unbuffered
  Duration log_access_flush = std::chrono::milliseconds{1000};  // log.access_flush
  engine::RoutePolicy defaults;
  std::vector<engine::RoutePolicy> routes;  // defaults already applied
  /// "FILE:LINE:COL: message" for what loads but is probably a mistake (a method no
  /// RFC defines); check-config prints them and serve logs them.
  std::vector<std::string> warnings;
};

/// Looks up an environment variable; std::nullopt when unset.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

/// Replaces ${NAME} and ${NAME:-default}; throws std::invalid_argument naming the
/// variable when it is unset and has no default.
std::string substitute_env(const std::string& text, const EnvLookup& env);

/// "500ms", "30s", "5m", "24h". Throws std::invalid_argument.
Duration parse_duration(const std::string& text);
/// "512", "64KiB", "1MiB", "1GiB". Throws std::invalid_argument.
std::size_t parse_size(const std::string& text);

/// Every key the loader accepts: dotted paths for nested keys (`upstream.url`), bare
/// names for top-level, route-policy and route-only keys. The README documents each.
std::vector<std::string> documented_keys();

/// The restart-only keys (listen, the upstream, the store, TLS, the replay cache's
/// size, server.threads) whose value in `next` differs from the running one.
std::vector<std::string> restart_only_changes(const Config& running, const Config& next);
/// Puts every restart-only key of `next` back to its running value.
void keep_restart_only(Config& next, const Config& running);

/// Parses configuration text; `file` names it in errors. Throws ConfigError.
Config parse_config(const std::string& text, const std::string& file, const EnvLookup& env);
/// Reads and parses a file. Throws ConfigError.
Config load_config(const std::string& file);

}  // namespace idemproxy::config
