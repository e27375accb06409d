// Canonical JSON fingerprinting: never crashes, and canonicalising is idempotent, so a
// retry of a canonical body always matches. Under a rule (include or exclude
// pointers, into arrays too) the same holds, and a fingerprint keeps its rule.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "idemproxy/engine/fingerprint.hpp"
#include "idemproxy/engine/fingerprint_rule.hpp"

namespace {

void under(const idemproxy::engine::FingerprintRule& rule, const std::string& body,
           const std::string& canonical) {
  using idemproxy::engine::RequestParts;
  const auto a = idemproxy::engine::fingerprint(
      rule, RequestParts{"POST", "/v1/x?a=1", "application/json", body, nullptr}, 128);
  const auto b = idemproxy::engine::fingerprint(
      rule, RequestParts{"POST", "/v1/x?a=1", "application/json", canonical, nullptr}, 128);
  if (a != b || !idemproxy::engine::rule_of(a) || *idemproxy::engine::rule_of(a) != rule) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const std::string canonical = idemproxy::engine::canonical_json(body);
  if (idemproxy::engine::canonical_json(canonical) != canonical) std::abort();
  const auto a = idemproxy::engine::fingerprint("POST", "/v1/x", "application/json", body);
  const auto b = idemproxy::engine::fingerprint("POST", "/v1/x", "application/json", canonical);
  if (a != b || a.size() != 64) std::abort();
  idemproxy::engine::fingerprint("POST", "/v1/x", "text/plain", body);
  idemproxy::engine::FingerprintRule include;
  include.include = {"/a", "/a/0", "/b/c/1", "/99999999999999999999", "/~1~0"};
  under(include, body, canonical);
  idemproxy::engine::FingerprintRule exclude;
  exclude.exclude = {"/a/1", "/a/10", "/a", "/b/c", "/0"};
  exclude.query = idemproxy::engine::FingerprintRule::Query::none;
  under(exclude, body, canonical);
  return 0;
}
