#pragma once
// SHA-256 of a string, in lower-case hex (OpenSSL). Logs name keys by a prefix of it.
#include <openssl/evp.h>

#include <array>
#include <string>
#include <string_view>

#include "idemproxy/common/hex.hpp"

namespace idemproxy {

inline std::string sha256_hex(std::string_view data) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), md.data(), &n, EVP_sha256(), nullptr);
  return to_hex({reinterpret_cast<const char*>(md.data()), n});
}

}  // namespace idemproxy
