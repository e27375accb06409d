// Reading one route policy (in `defaults` or a route).
#include <algorithm>
#include <cctype>
#include <limits>
#include <string_view>

#include "config/reader.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "idemproxy/engine/key.hpp"

namespace idemproxy::config::detail {
namespace {

// RFC 9110 5.6.2: tchar.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  return std::all_of(s.begin(), s.end(), [](unsigned char c) {
    return std::isalnum(c) ||
           std::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) != std::string_view::npos;
  });
}

// The methods RFC 9110 9.3 defines, and PATCH (RFC 5789).
bool is_known_method(std::string_view m) {
  for (const std::string_view known :
       {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}) {
    if (m == known) return true;
  }
  return false;
}

}  // namespace

std::string Reader::field_name(const YAML::Node& n, const std::string& name) const {
  std::string v = text(n, name);
  if (!is_token(v)) {
    fail(n, name +
                " must be a header field name (letters, digits and !#$%&'*+-.^_`|~, no "
                "spaces; RFC 9110 5.1), not \"" +
                v + "\"");
  }
  return v;
}

void Reader::policy(const YAML::Node& n, const std::string& path, engine::RoutePolicy& p,
                    bool is_route) const {
  auto known = section("route_policy");
  if (is_route) known.insert(section("route").begin(), section("route").end());
  expect_map(n, path, known);
  for (const auto& item : n) {
    const auto key = item.first.as<std::string>();
    const YAML::Node& v = item.second;
    const std::string name = path + "." + key;
    if (key == "name") {
      p.name = text(v, name);
    } else if (key == "path_prefix") {
      p.path_prefix = text(v, name);
      if (p.path_prefix.empty() || p.path_prefix.front() != '/')
        fail(v, name + " must start with /");
    } else if (key == "case_sensitive") {
      p.case_sensitive = boolean(v, name);
    } else if (key == "enabled") {
      p.enabled = boolean(v, name);
    } else if (key == "header") {
      p.header = field_name(v, name);
    } else if (key == "methods") {
      p.methods = list(v, name);
      if (p.methods.empty()) {
        fail(v, name + " is empty: the route would protect nothing (e.g. [POST, PATCH])");
      }
      std::size_t i = 0;
      for (auto& m : p.methods) {
        const YAML::Node at = v[i++];
        if (!is_token(m)) fail(at, name + ": \"" + m + "\" is not a method name (RFC 9110 9.1)");
        for (auto& c : m) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        if (!is_known_method(m)) {
          warn(at, name + ": " + m +
                       " is not a method RFC 9110 or RFC 5789 defines (a typo for POST?); only "
                       "requests with exactly this method are protected");
        }
      }
    } else if (key == "key_required") {
      p.key_required = boolean(v, name);
    } else if (key == "forward_fencing_token") {
      p.forward_fencing_token = boolean(v, name);
    } else if (key == "statuses") {
      expect_map(v, name, section("statuses"));
      const auto code = [&](const char* status_key, int& out) {
        if (v[status_key]) out = integer(v[status_key], name + "." + status_key, 400, 599);
      };
      code("missing_key", p.statuses.missing_key);
      code("mismatch", p.statuses.mismatch);
      code("in_flight", p.statuses.in_flight);
      code("store_unavailable", p.statuses.store_unavailable);
      code("expired", p.statuses.expired);
    } else if (key == "key_json_pointer") {
      p.key_json_pointer = text(v, name);
      if (const auto error = engine::json_pointer_error(p.key_json_pointer)) {
        fail(v, name + " " + *error + ", not \"" + p.key_json_pointer + "\"");
      }
    } else if (key == "namespace") {
      p.key_namespace = text(v, name);
      const bool fits =
          !p.key_namespace.empty() && p.key_namespace.size() <= 64 &&
          std::all_of(p.key_namespace.begin(), p.key_namespace.end(), [](char c) {
            return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
          });
      if (!fits) {
        fail(v, name + " must be 1 to 64 letters, digits, '.', '_' or '-' (e.g. v2), not \"" +
                    p.key_namespace + "\"");
      }
    } else if (key == "after_expiry") {
      p.after_expiry_reject = choice<bool>(v, name, {{"execute", false}, {"reject", true}});
    } else if (key == "tombstone_ttl") {
      p.tombstone_ttl = duration(v, name);
      if (p.tombstone_ttl.count() <= 0) fail(v, name + " must be positive");
    } else if (key == "max_key_age") {
      p.max_key_age = duration(v, name);
      if (p.max_key_age.count() <= 0) fail(v, name + " must be positive");
    } else if (key == "ttl") {
      p.ttl = duration(v, name);
      if (p.ttl.count() <= 0) fail(v, name + " must be positive");
    } else if (key == "max_ttl") {
      p.max_ttl = duration(v, name);
      if (p.max_ttl.count() <= 0) fail(v, name + " must be positive");
    } else if (key == "lease") {
      p.lease = duration(v, name);
      // The holder renews its lease every lease / 3 while the upstream works; shorter
      // than a second, one slow renewal would free the key of a live holder.
      if (p.lease < std::chrono::seconds{1}) fail(v, name + " must be at least 1s");
    } else if (key == "scope_header") {
      p.scope_header = text(v, name);
      if (!p.scope_header.empty()) p.scope_header = field_name(v, name);
    } else if (key == "scope") {
      expect_map(v, name, section("scope"));
      if (!v["from"]) {
        fail(v, name + ".from is required (header, authorization or client_cert)");
      }
      p.scope_from = choice<engine::ScopeFrom>(v["from"], name + ".from",
                                               {{"header", engine::ScopeFrom::header},
                                                {"authorization", engine::ScopeFrom::authorization},
                                                {"client_cert", engine::ScopeFrom::client_cert}});
      if (p.scope_from == engine::ScopeFrom::header) {
        if (!v["header"]) fail(v, name + ".header is required with from: header");
        p.scope_header = field_name(v["header"], name + ".header");
      } else if (v["header"]) {
        fail(v["header"], name + ".header applies only to from: header");
      }
      if (v["hash"] && !boolean(v["hash"], name + ".hash")) {
        fail(v["hash"], name +
                            ".hash: the raw Authorization header is never stored; it is "
                            "always a keyed hash (set hash: true or leave it out)");
      }
    } else if (key == "on_concurrent") {
      p.on_concurrent = choice<engine::OnConcurrent>(
          v, name,
          {{"reject", engine::OnConcurrent::reject}, {"wait", engine::OnConcurrent::wait}});
    } else if (key == "mode") {
      p.mode = choice<engine::Mode>(
          v, name, {{"enforce", engine::Mode::enforce}, {"shadow", engine::Mode::shadow}});
    } else if (key == "on_stale") {
      p.on_stale = choice<engine::OnStale>(
          v, name, {{"fail", engine::OnStale::fail}, {"retake", engine::OnStale::retake}});
    } else if (key == "store_status") {
      if (!v.IsSequence()) fail(v, name + " must be a list, e.g. [2xx, 4xx]");
      p.store_status.clear();
      for (const auto& s : v) {
        engine::StatusRange range;
        if (!engine::parse_status_range(text(s, name), range)) {
          fail(s, name + " entries must be a status (201) or a class (2xx)");
        }
        p.store_status.push_back(range);
      }
    } else if (key == "store_grpc_status") {
      if (!v.IsSequence()) fail(v, name + " must be a list, e.g. [OK, NOT_FOUND]");
      p.store_grpc_status.clear();
      for (const auto& s : v) {
        const auto word = text(s, name);
        const auto code = engine::grpc_status_code(word);
        if (!code) {
          fail(s, name + " entries must be gRPC status names (OK, NOT_FOUND, ...), not \"" + word +
                      "\"");
        }
        if (engine::grpc_status_retryable(*code)) {
          fail(s, name + ": " + word +
                      " is never stored: it says \"try again\", so the claim is released "
                      "and a retry runs the call");
        }
        p.store_grpc_status.push_back(*code);
      }
    } else if (key == "store_unavailable") {
      p.store_unavailable =
          choice<engine::StoreUnavailable>(v, name,
                                           {{"fail_closed", engine::StoreUnavailable::fail_closed},
                                            {"fail_open", engine::StoreUnavailable::fail_open}});
    } else if (key == "max_body") {
      p.max_body = size(v, name);
    } else if (key == "max_stored_answer") {
      p.max_stored_answer = size(v, name);
    } else if (key == "store_deny_headers") {
      p.deny_headers = list(v, name);
    } else if (key == "fingerprint") {
      fingerprint_rule(v, name, p.fingerprint);
    } else if (key == "quota") {
      quota(v, name, p.quota);
    }
  }
}

// The `quota` section, which replaces the defaults' whole: each cap is on its own.
void Reader::quota(const YAML::Node& v, const std::string& name, store::Quota& quota) const {
  expect_map(v, name, section("quota"));
  quota = {};
  constexpr int kMost = std::numeric_limits<int>::max();
  if (v["records"]) quota.records = integer(v["records"], name + ".records", 1, kMost);
  if (v["bytes"]) {
    quota.bytes = static_cast<std::int64_t>(size(v["bytes"], name + ".bytes"));
    if (quota.bytes <= 0) fail(v["bytes"], name + ".bytes must be positive");
  }
  if (v["in_flight"]) quota.in_flight = integer(v["in_flight"], name + ".in_flight", 1, kMost);
  if (!quota.any()) {
    fail(v, name + " caps nothing: set records, bytes or in_flight (or leave quota out)");
  }
}

// The `fingerprint` section, which replaces the defaults' whole.
void Reader::fingerprint_rule(const YAML::Node& v, const std::string& name,
                              engine::FingerprintRule& rule) const {
  expect_map(v, name, section("fingerprint"));
  rule = {};
  const auto pointers = [&](const char* which, std::vector<std::string>& into) {
    if (!v[which]) return;
    into = list(v[which], name + "." + which);
    std::size_t i = 0;
    for (const auto& p : into) {
      const YAML::Node at = v[which][i++];
      if (p.empty()) fail(at, name + "." + which + ": \"\" is the whole body; leave it out");
      if (const auto error = engine::json_pointer_error(p)) {
        fail(at, name + "." + which + ": " + *error + ", not \"" + p + "\"");
      }
    }
  };
  pointers("json_include", rule.include);
  pointers("json_exclude", rule.exclude);
  if (v["json_include"] && v["json_exclude"]) {
    fail(v["json_exclude"], name +
                                ": json_include and json_exclude do not go together "
                                "(json_include names what counts, json_exclude what does not)");
  }
  if (const YAML::Node q = v["query"]) {
    if (q.IsSequence()) {
      rule.query = engine::FingerprintRule::Query::listed;
      rule.query_params = list(q, name + ".query");
    } else {
      rule.query =
          choice<engine::FingerprintRule::Query>(q, name + ".query",
                                                 {{"all", engine::FingerprintRule::Query::all},
                                                  {"none", engine::FingerprintRule::Query::none}});
    }
  }
  if (const YAML::Node h = v["headers"]) {
    if (!h.IsSequence())
      fail(h, name + ".headers must be a list of field names (e.g. [X-Account])");
    for (std::size_t i = 0; i < h.size(); ++i) {
      std::string field = field_name(h[i], name + ".headers");
      for (auto& c : field) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      rule.headers.push_back(std::move(field));
    }
  }
}

}  // namespace idemproxy::config::detail
