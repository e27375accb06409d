// The published idempotency policy, generated from the configuration.
#include "proxy/policy_document.hpp"

#include <array>
#include <nlohmann/json.hpp>

#include "http/problem.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "idemproxy/engine/key.hpp"
#include "proxy/lookup.hpp"

namespace idemproxy::proxy {
namespace {

using json = nlohmann::ordered_json;

// "24h", "90s", "1500ms": the largest unit that states the duration exactly.
std::string spelled(Duration d) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
  constexpr std::array<std::pair<std::int64_t, const char*>, 3> units{
      {{3600000, "h"}, {60000, "m"}, {1000, "s"}}};
  for (const auto& [size, unit] : units) {
    if (ms > 0 && ms % size == 0) return std::to_string(ms / size) + unit;
  }
  return std::to_string(ms) + "ms";
}

json seconds(Duration d) {
  return static_cast<double>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count()) /
         1000.0;
}

json key_source(const engine::RoutePolicy& r) {
  json key = {{"header", r.header},
              {"required", r.key_required},
              {"max_length", engine::kMaxKeyLength},
              {"syntax",
               "1 to 255 printable ASCII characters: an RFC 8941 String or a bare token "
               "(draft-ietf-httpapi-idempotency-key-header section 2.1)"}};
  if (!r.key_json_pointer.empty()) {
    key["json_pointer"] = r.key_json_pointer;
    key["source"] = "the header, else the JSON body at json_pointer (RFC 6901)";
  } else {
    key["source"] = "the header";
  }
  switch (r.scope_from) {
    case engine::ScopeFrom::authorization:
      key["scope"] = "the Authorization credential (keys are per credential)";
      break;
    case engine::ScopeFrom::client_cert:
      key["scope"] = "the client certificate's subject (keys are per client)";
      break;
    case engine::ScopeFrom::header:
      key["scope"] =
          r.scope_header.empty() ? "one shared scope" : "the " + r.scope_header + " header";
      break;
  }
  if (!r.key_namespace.empty()) key["namespace"] = r.key_namespace;
  return key;
}

json stored_statuses(const engine::RoutePolicy& r) {
  json http = json::array();
  for (const auto& range : r.store_status) {
    http.push_back(range.low == range.high
                       ? std::to_string(range.low)
                       : std::to_string(range.low) + "-" + std::to_string(range.high));
  }
  json grpc = json::array();
  for (const int code : r.store_grpc_status) grpc.push_back(engine::grpc_status_name(code));
  return {{"http", http},
          {"never", "408, 409, 425 and 429, and an answer carrying Idempotency-Policy: no-store"},
          {"grpc", grpc}};
}

json expiry(const engine::RoutePolicy& r) {
  json e = {{"ttl", spelled(r.ttl)}, {"ttl_seconds", seconds(r.ttl)}};
  if (r.after_expiry_reject) {
    e["after_expiry"] = "reject";
    e["tombstone_ttl"] = spelled(r.tombstone_ttl);
    e["meaning"] =
        "a completed request is replayed to retries for ttl after it completed; after that, "
        "until tombstone_ttl, a retry with the same key is refused (expired) and never "
        "executed again";
  } else {
    e["after_expiry"] = "execute";
    e["meaning"] =
        "a completed request is replayed to retries for ttl after it completed; after that, "
        "a retry with the same key executes again";
  }
  const Duration longest = r.longest_ttl();
  e["max_ttl"] = spelled(longest);
  e["max_ttl_seconds"] = seconds(longest);
  e["upstream_sets"] =
      "an answer carrying Idempotency-Policy: max-age=N is kept for N seconds instead of ttl, "
      "at most max_ttl";
  if (r.max_key_age.count() > 0) {
    e["max_key_age"] = spelled(r.max_key_age);
    e["max_key_age_meaning"] = "a UUIDv7 key minted longer ago than this is refused (expired)";
  }
  return e;
}

// A route's caps per tenant (the key's scope), or the word that there are none.
json quota(const store::Quota& q) {
  if (!q.any()) return "none";
  json out = {{"per", "tenant (the key's scope)"},
              {"over_a_cap",
               "a new key gets 429 quota-exceeded (Retry-After for in_flight); retries of "
               "stored keys still replay"}};
  if (q.records > 0) out["records"] = q.records;
  if (q.bytes > 0) out["bytes"] = q.bytes;
  if (q.in_flight > 0) out["in_flight"] = q.in_flight;
  return out;
}

// What decides whether a reuse of a key is another request (the `fingerprint`
// section): the method and path always; the body, query and fields as the rule says.
json fingerprint(const engine::FingerprintRule& f) {
  using Query = engine::FingerprintRule::Query;
  json body = "the whole body (JSON compared by value, other bodies by their bytes)";
  if (!f.include.empty()) body = {{"include", f.include}};
  if (!f.exclude.empty()) body = {{"exclude", f.exclude}};
  json query = f.query == Query::all ? json("all") : json("none");
  if (f.query == Query::listed) query = f.query_params;
  return {{"method_and_path", true},
          {"body", body},
          {"query", query},
          {"headers", f.headers},
          {"meaning",
           "the same key with a request that differs in what this covers is refused "
           "(key-mismatch); a JSON member absent and one set to null differ; a record is "
           "compared under the rule it was stored with"}};
}

json route_entry(const engine::RoutePolicy& r) {
  json errors = json::array();
  for (const auto& e : problem_catalog(r)) {
    errors.push_back({{"type", e.type},
                      {"status", e.status},
                      {"title", e.title},
                      {"grpc_status", engine::grpc_status_name(e.grpc_code)}});
  }
  return {
      {"name", r.name},
      {"path_prefix", r.path_prefix},
      {"methods", r.methods},
      {"mode", r.mode == engine::Mode::shadow ? "shadow (recorded, never enforced)" : "enforce"},
      {"key", key_source(r)},
      {"expiry", expiry(r)},
      {"lease", {{"duration", spelled(r.lease)}, {"seconds", seconds(r.lease)}}},
      {"on_concurrent",
       r.on_concurrent == engine::OnConcurrent::wait
           ? "wait: a retry while the first request runs waits for its answer (up to lease)"
           : "reject: a retry while the first request runs is refused with Retry-After"},
      {"fingerprint", fingerprint(r.fingerprint)},
      {"quota", quota(r.quota)},
      {"stored_statuses", stored_statuses(r)},
      {"replay", "the stored status, fields and body, with Idempotent-Replayed: true"},
      {"errors", errors},
  };
}

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string joined;
    for (const auto& item : v) joined += (joined.empty() ? "" : ", ") + text(item);
    return joined;
  }
  if (v.is_object()) {
    std::string joined;
    for (const auto& [name, item] : v.items()) {
      joined += (joined.empty() ? "" : "; ") + name + ": " + text(item);
    }
    return joined;
  }
  return v.dump();
}

json policy_document(const config::Config& config) {
  json routes = json::array();
  for (const auto& r : config.routes) {
    if (r.enabled) routes.push_back(route_entry(r));
  }
  json doc = {{"specification", "draft-ietf-httpapi-idempotency-key-header"},
              {"generated_by", "idemproxy, from its configuration"},
              {"routes", routes}};
  // Where a caller asks what became of its own key (proxy/lookup.hpp).
  if (!config.policy.path.empty()) {
    doc["lookup"] = {{"method", "GET"},
                     {"target", config.policy.path + std::string(kLookupSuffix) + "?path={path}"},
                     {"sends", "the key and credentials of the request it asks about"}};
  }
  return doc;
}

std::string policy_page(const json& document) {
  std::string page =
      "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<title>Idempotency policy</title></head><body>\n<h1>Idempotency policy</h1>\n"
      "<p>Requests on these routes may carry an idempotency key "
      "(draft-ietf-httpapi-idempotency-key-header). A retry with the same key and the "
      "same request gets the first answer again instead of running twice.</p>\n";
  for (const auto& r : document["routes"]) {
    page += "<h2>" + escape(text(r["name"])) + ": " + escape(text(r["path_prefix"])) + "</h2>\n";
    page += "<table>\n";
    for (const char* field : {"methods", "mode", "key", "expiry", "lease", "on_concurrent",
                              "fingerprint", "quota", "stored_statuses", "replay"}) {
      page +=
          "<tr><th>" + std::string(field) + "</th><td>" + escape(text(r[field])) + "</td></tr>\n";
    }
    page +=
        "</table>\n<h3>Errors</h3>\n<table>\n<tr><th>type</th><th>status</th>"
        "<th>gRPC status</th><th>title</th></tr>\n";
    for (const auto& e : r["errors"]) {
      page += "<tr><td>" + escape(text(e["type"])) + "</td><td>" + escape(text(e["status"])) +
              "</td><td>" + escape(text(e["grpc_status"])) + "</td><td>" +
              escape(text(e["title"])) + "</td></tr>\n";
    }
    page += "</table>\n";
  }
  if (document.contains("lookup")) {
    page += "<h2>What became of a key</h2>\n<p>GET " + escape(text(document["lookup"]["target"])) +
            " with " + escape(text(document["lookup"]["sends"])) + ".</p>\n";
  }
  page += "<p>" + escape(text(document["generated_by"])) + "</p>\n</body></html>\n";
  return page;
}

}  // namespace

PublishedPolicy publish_policy(const config::Config& config) {
  const json document = policy_document(config);
  const std::string& target = config.policy.target();
  return {document.dump(2) + "\n", policy_page(document),
          target.empty() ? std::string() : "<" + target + ">; rel=\"describedby\""};
}

}  // namespace idemproxy::proxy

namespace idemproxy::proxy {

std::shared_ptr<const Settings> make_settings(config::Config config) {
  auto policy = publish_policy(config);
  return std::make_shared<const Settings>(std::move(config), std::move(policy));
}

}  // namespace idemproxy::proxy
