// defaults and routes: each route's policy over the defaults, and the checks that
// need the whole configuration (a scope source's prerequisites, tombstones, the
// lease against the statement timeout, routes hidden by an earlier prefix).
#include <set>
#include <string>

#include "config/sections.hpp"

namespace idemproxy::config::detail {
namespace {

// Where a route's `key` was set: in the route, else in defaults, else (the built-in
// default) the route itself. Returned, never assigned to a Node variable: yaml-cpp's
// `Node a = x; a = y;` writes y into x rather than naming y, and on an invalid node
// (a key that is absent) it throws "invalid node", which hid the real error.
YAML::Node origin(const YAML::Node& root, const YAML::Node& route, const char* key) {
  if (route[key]) return route[key];
  if (root["defaults"] && root["defaults"][key]) return root["defaults"][key];
  return route;
}

}  // namespace

void read_routes(const YAML::Node& root, const Reader& r, Config& c) {
  if (const YAML::Node d = root["defaults"]) r.policy(d, "defaults", c.defaults, false);
  if (const YAML::Node routes = root["routes"]) {
    if (!routes.IsSequence()) r.fail(routes, "routes must be a list");
    std::set<std::string> names;
    for (const auto& node : routes) {
      engine::RoutePolicy p = c.defaults;
      p.name.clear();
      r.policy(node, "routes[" + std::to_string(c.routes.size()) + "]", p, true);
      if (p.name.empty()) r.fail(node, "every route needs a name");
      if (!node["path_prefix"]) r.fail(node, "route \"" + p.name + "\" needs a path_prefix");
      if (!names.insert(p.name).second) r.fail(node, "duplicate route name \"" + p.name + "\"");
      if (p.scope_from == engine::ScopeFrom::client_cert && c.tls.client_ca_file.empty()) {
        r.fail(origin(root, node, "scope"),
               "scope: {from: client_cert} needs tls.client_ca_file (clients must present a "
               "verified certificate)");
      }
      if (p.scope_from == engine::ScopeFrom::authorization && c.scope_key.empty()) {
        r.fail(origin(root, node, "scope"),
               "scope: {from: authorization} needs scope_key (an HMAC key of 32+ characters, "
               "e.g. ${IDEMPROXY_SCOPE_KEY})");
      }
      // max-age may lengthen ttl up to max_ttl; a bound below ttl would shorten every
      // answer the upstream says nothing about.
      if (p.max_ttl.count() > 0 && p.max_ttl < p.ttl) {
        r.fail(origin(root, node, "max_ttl"),
               "route \"" + p.name +
                   "\": max_ttl must be at least ttl: it bounds how far an answer's "
                   "Idempotency-Policy: max-age may lengthen ttl (max-age may always shorten it)");
      }
      // A tombstone outlives the answer: it is what refuses a retry after ttl.
      if (p.after_expiry_reject && p.tombstone_ttl <= p.ttl) {
        r.fail(origin(root, node, p.tombstone_ttl.count() > 0 ? "tombstone_ttl" : "after_expiry"),
               "route \"" + p.name +
                   "\": after_expiry: reject needs a tombstone_ttl longer than "
                   "ttl (e.g. 30d): the tombstone is what refuses a retry after ttl");
      }
      if (!p.after_expiry_reject && p.tombstone_ttl.count() > 0) {
        r.fail(origin(root, node, "tombstone_ttl"),
               "route \"" + p.name +
                   "\": tombstone_ttl applies with after_expiry: reject "
                   "(with execute, a retry after ttl executes and nothing is kept)");
      }
      // A renewal that may take as long as the lease cannot keep it: the lease of a
      // live holder would run out, and a retry would be told outcome-unknown (or,
      // with on_stale: retake, execute a second time).
      if (c.store.kind == StoreConfig::Kind::postgres && p.lease <= c.store.statement_timeout) {
        r.fail(origin(root, node, "lease"),
               "route \"" + p.name + "\": lease (" + std::to_string(p.lease.count()) +
                   " ms) must be longer than store.postgres.statement_timeout, "
                   "which bounds each lease renewal");
      }
      // First match wins, by path alone: a route whose prefix an earlier route
      // covers can never match (its methods and policy would silently not apply).
      for (const auto& earlier : c.routes) {
        const bool hides_every_spelling = !earlier.case_sensitive || p.case_sensitive;
        if (hides_every_spelling && engine::RouteTable({earlier}).match(p.path_prefix)) {
          r.fail(node["path_prefix"], "route \"" + p.name + "\" (path_prefix " + p.path_prefix +
                                          ") can never match: route \"" + earlier.name +
                                          "\" (path_prefix " + earlier.path_prefix +
                                          ") comes first and covers it; list the longer prefix "
                                          "first");
        }
      }
      c.routes.push_back(std::move(p));
    }
  }
  if (c.routes.empty()) {
    r.fail(root["routes"] ? root["routes"] : root,
           "no routes: nothing would be protected, every request passes through (add one, "
           "e.g. routes: [{name: orders, path_prefix: /v1/orders}])");
  }
}

}  // namespace idemproxy::config::detail
