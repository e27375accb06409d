#pragma once
// SHA-256 of a string, in lower-case hex (OpenSSL). Logs name keys by a prefix of it.
#include <openssl/evp.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "idemproxy/common/hex.hpp"
#include "idemproxy/common/inline_string.hpp"

namespace idemproxy {

/// SHA-256's implementation, fetched once. EVP_sha256() makes each digest it starts
/// look the implementation up in the provider store again (OpenSSL 3's implicit
/// fetch, under a lock): measured at 3.4% of a replay's CPU with sha256_hex below.
inline const EVP_MD* sha256_md() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md;
}

/// This thread's SHA-256 context, started anew: one context per thread, reset by each
/// init, so no digest allocates one (EVP_MD_CTX_new and the provider's context were 3
/// allocations per fresh key's fingerprint). A digest must end, with
/// sha256_final_hex, before the thread starts the next.
inline EVP_MD_CTX* sha256_start() {
  thread_local const std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(),
                                                                                 &EVP_MD_CTX_free);
  EVP_DigestInit_ex2(ctx.get(), sha256_md(), nullptr);
  return ctx.get();
}

/// The digest of what `ctx` was given (SHA-256's 32 bytes).
inline std::array<char, 32> sha256_final(EVP_MD_CTX* ctx) {
  std::array<char, 32> md{};
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx, reinterpret_cast<unsigned char*>(md.data()), &n);
  return md;
}

/// A SHA-256 of its own, for a digest that spans awaits (a streamed body): not this
/// thread's context, which the next digest on the thread restarts.
class Sha256Stream {
 public:
  Sha256Stream() { EVP_DigestInit_ex2(ctx_.get(), sha256_md(), nullptr); }
  void update(std::string_view data) { EVP_DigestUpdate(ctx_.get(), data.data(), data.size()); }
  /// The 32 bytes; the stream is spent.
  std::string final() {
    std::array<char, 32> md{};
    unsigned int n = 0;
    EVP_DigestFinal_ex(ctx_.get(), reinterpret_cast<unsigned char*>(md.data()), &n);
    return {md.data(), md.size()};
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_{EVP_MD_CTX_new(), &EVP_MD_CTX_free};
};

/// The digest of what `ctx` was given, in lower-case hex.
inline std::string sha256_final_hex(EVP_MD_CTX* ctx) {
  const auto md = sha256_final(ctx);
  return to_hex({md.data(), md.size()});
}

inline std::string sha256_hex(std::string_view data) {
  EVP_MD_CTX* ctx = sha256_start();
  EVP_DigestUpdate(ctx, data.data(), data.size());
  return sha256_final_hex(ctx);
}

/// The first 16 hex digits of SHA-256(data), which logs and spans name a key by, held
/// inline: sha256_hex(key).substr(0, 16) took two heap blocks per request.
inline InlineString<16> sha256_hex16(std::string_view data) {
  EVP_MD_CTX* ctx = sha256_start();
  EVP_DigestUpdate(ctx, data.data(), data.size());
  const auto md = sha256_final(ctx);
  std::array<char, 16> hex{};
  hex_into({md.data(), hex.size() / 2}, hex.data());
  return InlineString<16>({hex.data(), hex.size()});
}

}  // namespace idemproxy
