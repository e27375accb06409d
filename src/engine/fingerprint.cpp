#include "idemproxy/engine/fingerprint.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <array>
#include <cctype>

#include "engine/digest.hpp"
#include "idemproxy/common/hex.hpp"
#include "idemproxy/common/sha256.hpp"

namespace idemproxy::engine {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::string canonical_json(std::string_view body) {
  auto canonical = canonicalize_json(body, kMaxJsonDepth);
  return canonical ? std::move(*canonical) : std::string(body);
}

bool is_json_content_type(std::string_view content_type) {
  const std::string type = lower(content_type.substr(0, content_type.find(';')));
  std::string_view t = type;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  while (!t.empty() && t.front() == ' ') t.remove_prefix(1);
  return t == "application/json" || (t.starts_with("application/") && t.ends_with("+json"));
}

std::string fingerprint(std::string_view method, std::string_view target,
                        std::string_view content_type, std::string_view body,
                        std::size_t max_json_depth) {
  PartsDigest h;
  h.part(method);
  h.part(target);
  if (is_json_content_type(content_type)) {
    h.part("json");
    const auto canonical = canonicalize_json(body, max_json_depth);
    h.part(canonical ? std::string_view(*canonical) : body);
  } else {
    h.part("raw");
    h.part(body);
  }
  return h.hex();
}

std::string hmac_sha256_hex(std::string_view key, std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  HMAC(sha256_md(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md.data(), &n);
  return to_hex({reinterpret_cast<const char*>(md.data()), n});
}

}  // namespace idemproxy::engine
