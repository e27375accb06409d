// Canonical JSON fingerprinting: never crashes, and canonicalising is idempotent, so a
// retry of a canonical body always matches.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "idemproxy/engine/fingerprint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  const std::string canonical = idemproxy::engine::canonical_json(body);
  if (idemproxy::engine::canonical_json(canonical) != canonical) std::abort();
  const auto a = idemproxy::engine::fingerprint("POST", "/v1/x", "application/json", body);
  const auto b = idemproxy::engine::fingerprint("POST", "/v1/x", "application/json", canonical);
  if (a != b || a.size() != 64) std::abort();
  idemproxy::engine::fingerprint("POST", "/v1/x", "text/plain", body);
  return 0;
}
