#pragma once
// The fingerprint's digest: SHA-256 over length-prefixed parts, on this thread's
// context (sha256_start), so ("ab", "c") and ("a", "bc") differ.
#include <openssl/evp.h>

#include <string>
#include <string_view>

#include "idemproxy/common/sha256.hpp"

namespace idemproxy::engine {

class PartsDigest {
 public:
  void part(std::string_view data) {
    const std::string len = std::to_string(data.size()) + ":";
    EVP_DigestUpdate(ctx_, len.data(), len.size());
    EVP_DigestUpdate(ctx_, data.data(), data.size());
  }
  std::string hex() { return sha256_final_hex(ctx_); }

 private:
  EVP_MD_CTX* ctx_ = sha256_start();
};

}  // namespace idemproxy::engine
