// The configuration's sections other than routes: upstream, tls, store, server, and
// the housekeeping ones (policy, replay_cache, gc, log). Each fails with the
// position of what it refuses.
#include "config/sections.hpp"

#include <boost/url/parse.hpp>
#include <charconv>
#include <fstream>

#include "idemproxy/store/sealer.hpp"

namespace idemproxy::config::detail {
namespace {

// A path that must name a readable file (certificates, keys); checked at load so a
// typo is reported with its position rather than at the first connection.
std::string readable_file(const Reader& r, const YAML::Node& node, const std::string& name) {
  std::string path = r.text(node, name);
  if (path.empty()) r.fail(node, name + " is empty");
  if (!std::ifstream(path)) r.fail(node, name + ": cannot read " + path);
  return path;
}

// store.postgres.batch_wait: a duration as elsewhere, or microseconds ("250us"), since
// the useful waits are shorter than a millisecond; at most 100ms.
std::chrono::microseconds batch_wait(const Reader& r, const YAML::Node& node) {
  const std::string name = "store.postgres.batch_wait";
  const auto wait = r.parsed<std::chrono::microseconds>(node, name, [](const std::string& t) {
    if (!t.ends_with("us")) return std::chrono::microseconds{parse_duration(t)};
    std::uint32_t n = 0;
    const char* end = t.data() + t.size() - 2;
    if (auto [at, ec] = std::from_chars(t.data(), end, n); ec != std::errc{} || at != end) {
      throw std::invalid_argument("invalid duration \"" + t + "\" (e.g. 250us or 1ms)");
    }
    return std::chrono::microseconds{n};
  });
  if (wait > std::chrono::milliseconds{100}) r.fail(node, name + " must be at most 100ms");
  return wait;
}

}  // namespace

// upstream: the protected service and how it is reached.
void read_upstream(const YAML::Node& root, const Reader& r, Config& c) {
  const YAML::Node up = root["upstream"];
  if (!up) r.fail(root, "upstream is required (upstream: {url: http://127.0.0.1:3000})");
  r.expect_map(up, "upstream", section("upstream"));
  if (!up["url"]) r.fail(up, "upstream.url is required");
  c.upstream.url = r.text(up["url"], "upstream.url");
  auto parsed = boost::urls::parse_uri(c.upstream.url);
  if (!parsed) r.fail(up["url"], "upstream.url is not a valid URL: \"" + c.upstream.url + "\"");
  c.upstream.tls.enabled = parsed->scheme() == "https";
  if (parsed->scheme() != "http" && !c.upstream.tls.enabled) {
    r.fail(up["url"], "upstream.url must be an http:// or https:// URL");
  }
  if (parsed->host().empty()) r.fail(up["url"], "upstream.url has no host");
  c.upstream.host = std::string(parsed->host());
  if (c.upstream.host.size() > 2 && c.upstream.host.front() == '[') {
    c.upstream.host = c.upstream.host.substr(1, c.upstream.host.size() - 2);
  }
  c.upstream.port =
      parsed->has_port() ? std::string(parsed->port()) : (c.upstream.tls.enabled ? "443" : "80");
  if (parsed->has_query() || parsed->has_fragment()) {
    r.fail(up["url"], "upstream.url must not have a query or fragment");
  }
  c.upstream.base_path = std::string(parsed->encoded_path());
  while (!c.upstream.base_path.empty() && c.upstream.base_path.back() == '/') {
    c.upstream.base_path.pop_back();
  }
  if (const YAML::Node t = up["tls"]) {
    r.expect_map(t, "upstream.tls", section("upstream.tls"));
    if (!c.upstream.tls.enabled) r.fail(t, "upstream.tls applies to an https:// upstream.url");
    if (t["ca_file"])
      c.upstream.tls.ca_file = readable_file(r, t["ca_file"], "upstream.tls.ca_file");
    if (t["server_name"]) {
      c.upstream.tls.server_name = r.text(t["server_name"], "upstream.tls.server_name");
    }
    if (t["insecure_skip_verify"]) {
      c.upstream.tls.insecure_skip_verify =
          r.boolean(t["insecure_skip_verify"], "upstream.tls.insecure_skip_verify");
    }
    if (c.upstream.tls.insecure_skip_verify && !c.upstream.tls.ca_file.empty()) {
      r.fail(t, "upstream.tls: ca_file and insecure_skip_verify contradict each other");
    }
  }
  if (up["connect_timeout"])
    c.upstream.connect_timeout = r.duration(up["connect_timeout"], "upstream.connect_timeout");
  if (up["timeout"]) c.upstream.timeout = r.duration(up["timeout"], "upstream.timeout");
  if (up["read_timeout"])
    c.upstream.read_timeout = r.duration(up["read_timeout"], "upstream.read_timeout");
  if (up["stream_timeout"])
    c.upstream.stream_timeout = r.duration(up["stream_timeout"], "upstream.stream_timeout");
  if (up["idle_timeout"])
    c.upstream.idle_timeout = r.duration(up["idle_timeout"], "upstream.idle_timeout");
  if (up["max_idle_connections"]) {
    c.upstream.max_idle_connections = static_cast<std::size_t>(
        r.integer(up["max_idle_connections"], "upstream.max_idle_connections", 0, 100000));
  }
  if (up["max_response_size"])
    c.upstream.max_response_size = r.size(up["max_response_size"], "upstream.max_response_size");
  if (const YAML::Node p = up["protocol"]) {
    using P = UpstreamConfig::Protocol;
    c.upstream.protocol =
        r.choice<P>(p, "upstream.protocol",
                    {{"http1", P::http1}, {"h2c", P::h2c}, {"h2", P::h2}, {"auto", P::automatic}});
    if (c.upstream.protocol == P::h2c && c.upstream.tls.enabled) {
      r.fail(p, "upstream.protocol h2c is HTTP/2 in cleartext; an https:// upstream.url takes h2");
    }
    if ((c.upstream.protocol == P::h2 || c.upstream.protocol == P::automatic) &&
        !c.upstream.tls.enabled) {
      r.fail(p, "upstream.protocol " + r.text(p, "upstream.protocol") +
                    " negotiates HTTP/2 by TLS ALPN and needs an https:// upstream.url "
                    "(h2c speaks HTTP/2 in cleartext)");
    }
  }
  if (up["http2_max_streams"]) {
    c.upstream.http2_max_streams = static_cast<std::size_t>(
        r.integer(up["http2_max_streams"], "upstream.http2_max_streams", 1, 10000));
  }
}

// tls: TLS for clients (mTLS with client_ca_file).
void read_tls(const YAML::Node& root, const Reader& r, Config& c) {
  if (const YAML::Node t = root["tls"]) {
    r.expect_map(t, "tls", section("tls"));
    if (!t["cert_file"] || !t["key_file"]) r.fail(t, "tls needs both cert_file and key_file");
    c.tls.cert_file = readable_file(r, t["cert_file"], "tls.cert_file");
    c.tls.key_file = readable_file(r, t["key_file"], "tls.key_file");
    if (t["client_ca_file"]) {
      c.tls.client_ca_file = readable_file(r, t["client_ca_file"], "tls.client_ca_file");
    }
  }
}

// store: PostgreSQL or memory, and encryption at rest.
void read_store(const YAML::Node& root, const Reader& r, Config& c) {
  const YAML::Node st = root["store"];
  if (!st) r.fail(root, "store is required (store: {postgres: {dsn: ...}} or store: {memory: {}})");
  r.expect_map(st, "store", section("store"));
  if (st["postgres"] && st["memory"])
    r.fail(st, "store must name exactly one of postgres or memory");
  if (st["memory"]) {
    c.store.kind = StoreConfig::Kind::memory;
    const YAML::Node m = st["memory"];
    if (!m.IsNull()) r.expect_map(m, "store.memory", {});
  } else if (st["postgres"]) {
    const YAML::Node pg = st["postgres"];
    r.expect_map(pg, "store.postgres", section("store.postgres"));
    if (!pg["dsn"]) r.fail(pg, "store.postgres.dsn is required");
    c.store.dsn = r.text(pg["dsn"], "store.postgres.dsn");
    if (c.store.dsn.empty()) r.fail(pg["dsn"], "store.postgres.dsn is empty");
    if (pg["pool_size"])
      c.store.pool_size = r.integer(pg["pool_size"], "store.postgres.pool_size", 1, 256);
    if (pg["batch_max"])
      c.store.batch_max = r.integer(pg["batch_max"], "store.postgres.batch_max", 1, 1024);
    if (pg["batch_wait"]) c.store.batch_wait = batch_wait(r, pg["batch_wait"]);
    if (pg["transaction_pooling"])
      c.store.transaction_pooling =
          r.boolean(pg["transaction_pooling"], "store.postgres.transaction_pooling");
    if (pg["defer_chunk_flush"])
      c.store.defer_chunk_flush =
          r.boolean(pg["defer_chunk_flush"], "store.postgres.defer_chunk_flush");
    if (pg["citus"]) c.store.citus = r.boolean(pg["citus"], "store.postgres.citus");
    if (pg["statement_timeout"])
      c.store.statement_timeout =
          r.duration(pg["statement_timeout"], "store.postgres.statement_timeout");
  } else {
    r.fail(st, "store must name exactly one of postgres or memory");
  }
  if (const YAML::Node enc = st["encryption"]) {
    r.expect_map(enc, "store.encryption", section("store.encryption"));
    if (c.store.kind != StoreConfig::Kind::postgres) {
      r.fail(enc, "store.encryption applies to store.postgres (the memory store keeps nothing)");
    }
    if (!enc["key_file"]) r.fail(enc, "store.encryption.key_file is required");
    c.store.encryption_key_file = r.text(enc["key_file"], "store.encryption.key_file");
    try {
      store::read_key_file(c.store.encryption_key_file);  // fail at load, not at first request
    } catch (const std::invalid_argument& e) {
      r.fail(enc["key_file"], std::string("store.encryption.key_file: ") + e.what());
    }
  }
}

// server: threads, timeouts and limits of the client side.
void read_server(const YAML::Node& root, const Reader& r, Config& c) {
  if (const YAML::Node s = root["server"]) {
    r.expect_map(s, "server", section("server"));
    if (s["threads"]) c.server.threads = r.integer(s["threads"], "server.threads", 1, 256);
    if (s["drain_timeout"])
      c.server.drain_timeout = r.duration(s["drain_timeout"], "server.drain_timeout");
    if (s["idle_timeout"])
      c.server.idle_timeout = r.duration(s["idle_timeout"], "server.idle_timeout");
    if (s["read_timeout"])
      c.server.read_timeout = r.duration(s["read_timeout"], "server.read_timeout");
    if (s["header_timeout"]) {
      c.server.header_timeout = r.duration(s["header_timeout"], "server.header_timeout");
    }
    if (s["max_connections"]) {
      c.server.max_connections = static_cast<std::size_t>(
          r.integer(s["max_connections"], "server.max_connections", 1, 1000000));
    }
    if (s["max_header_size"])
      c.server.max_header_size = r.size(s["max_header_size"], "server.max_header_size");
    if (s["max_stream_body"])
      c.server.max_stream_body = r.size(s["max_stream_body"], "server.max_stream_body");
    if (s["max_unstored"]) {
      c.server.max_unstored = r.size(s["max_unstored"], "server.max_unstored");
      if (c.server.max_unstored < (std::size_t{1} << 20))
        r.fail(s["max_unstored"], "server.max_unstored must be at least 1MiB");
    }
    if (s["max_header_fields"]) {
      c.server.max_header_fields = static_cast<std::size_t>(
          r.integer(s["max_header_fields"], "server.max_header_fields", 1, 10000));
    }
    if (s["body_timeout"])
      c.server.body_timeout = r.duration(s["body_timeout"], "server.body_timeout");
    if (s["max_json_depth"]) {
      c.server.max_json_depth = static_cast<std::size_t>(
          r.integer(s["max_json_depth"], "server.max_json_depth", 1, 100000));
    }
    if (s["http2"]) c.server.http2 = r.boolean(s["http2"], "server.http2");
    if (s["merge_slashes"])
      c.server.merge_slashes = r.boolean(s["merge_slashes"], "server.merge_slashes");
    if (const YAML::Node e = s["escaped_slashes"]) {
      const std::string v = r.text(e, "server.escaped_slashes");
      if (v != "reject" && v != "keep") r.fail(e, "server.escaped_slashes must be reject or keep");
      c.server.reject_escaped_slashes = v == "reject";
    }
  }
}

// replay_cache, gc, log and policy.
void read_housekeeping(const YAML::Node& root, const Reader& r, Config& c) {
  if (const YAML::Node p = root["policy"]) {
    r.expect_map(p, "policy", section("policy"));
    if (const YAML::Node path = p["path"]) {
      c.policy.path = r.text(path, "policy.path");
      const bool plain = c.policy.path.find_first_of("?#% \t") == std::string::npos;
      if (!c.policy.path.empty() && (!c.policy.path.starts_with('/') || !plain)) {
        r.fail(path,
               "policy.path must be an absolute path such as /.well-known/idempotency "
               "(no query, fragment, escapes or spaces), or \"\" to serve none");
      }
    }
    if (const YAML::Node url = p["url"]) {
      c.policy.url = r.text(url, "policy.url");
      const bool absolute =
          c.policy.url.starts_with("https://") || c.policy.url.starts_with("http://");
      // RFC 8288 3.1: the target is a URI-Reference between < and >.
      if (!absolute || c.policy.url.find_first_of("<> \t\"") != std::string::npos) {
        r.fail(url,
               "policy.url must be an absolute http or https URL, not \"" + c.policy.url + "\"");
      }
    }
  }
  if (const YAML::Node rc = root["replay_cache"]) {
    r.expect_map(rc, "replay_cache", section("replay_cache"));
    if (rc["max_bytes"]) c.replay_cache_bytes = r.size(rc["max_bytes"], "replay_cache.max_bytes");
  }
  if (const YAML::Node g = root["gc"]) {
    r.expect_map(g, "gc", section("gc"));
    if (g["interval"]) c.gc.interval = r.duration(g["interval"], "gc.interval");
    if (g["batch_size"]) c.gc.batch_size = r.integer(g["batch_size"], "gc.batch_size", 1, 100000);
    if (g["max_batches"])
      c.gc.max_batches = r.integer(g["max_batches"], "gc.max_batches", 1, 100000);
  }
  if (const YAML::Node l = root["log"]) {
    r.expect_map(l, "log", section("log"));
    if (l["format"]) {
      c.log_format = r.text(l["format"], "log.format");
      if (c.log_format != "text" && c.log_format != "json") {
        r.fail(l["format"], "log.format must be text or json");
      }
    }
    if (l["level"]) {
      c.log_level = r.text(l["level"], "log.level");
      static const std::set<std::string> levels = {"trace", "debug", "info",
                                                   "warn",  "error", "off"};
      if (!levels.contains(c.log_level))
        r.fail(l["level"], "log.level must be one of trace, debug, info, warn, error, off");
    }
    if (l["access_buffer"]) {
      c.log_access_buffer = r.size(l["access_buffer"], "log.access_buffer");
      if (c.log_access_buffer > (std::size_t{64} << 20))
        r.fail(l["access_buffer"], "log.access_buffer must be at most 64MiB (0 writes each line)");
    }
    if (l["access_flush"]) {
      c.log_access_flush = r.duration(l["access_flush"], "log.access_flush");
      if (c.log_access_flush < std::chrono::milliseconds{1} ||
          c.log_access_flush > std::chrono::minutes{1})
        r.fail(l["access_flush"], "log.access_flush must be from 1ms to 1m");
    }
  }
}

}  // namespace idemproxy::config::detail
