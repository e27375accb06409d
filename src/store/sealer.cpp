#include "idemproxy/store/sealer.hpp"

#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <stdexcept>

#include "idemproxy/common/hex.hpp"

namespace idemproxy::store {
namespace {

constexpr std::size_t kNonce = 12;
constexpr std::size_t kTag = 16;

using CipherCtx = std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)>;

CipherCtx new_ctx() {
  CipherCtx ctx(EVP_CIPHER_CTX_new(), &EVP_CIPHER_CTX_free);
  if (!ctx) throw std::runtime_error("EVP_CIPHER_CTX_new failed");
  return ctx;
}

bool valid_id(std::string_view id) {
  if (id.empty() || id.size() > 32) return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

const auto* as_bytes(std::string_view s) {
  return reinterpret_cast<const unsigned char*>(s.data());
}

}  // namespace

std::vector<SealingKey> read_key_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read key file " + path);
  std::vector<SealingKey> keys;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = trim(line);
    if (line.empty() || line.front() == '#') continue;
    const auto where = path + " line " + std::to_string(number) + ": ";
    const auto colon = line.find(':');
    if (colon == std::string::npos) throw std::invalid_argument(where + "expected ID:HEX");
    SealingKey key;
    key.id = trim(line.substr(0, colon));
    const auto hex = trim(line.substr(colon + 1));
    if (!valid_id(key.id)) {
      throw std::invalid_argument(where + "the key id must be 1-32 of A-Z a-z 0-9 . _ -");
    }
    if (hex.size() != 64) {
      throw std::invalid_argument(where +
                                  "the key must be 64 hex digits (32 bytes), e.g. from "
                                  "`openssl rand -hex 32`");
    }
    const auto bytes = from_hex(hex);
    if (!bytes) throw std::invalid_argument(where + "the key is not hexadecimal");
    std::copy(bytes->begin(), bytes->end(), key.bytes.begin());
    keys.push_back(std::move(key));
  }
  if (keys.empty()) throw std::invalid_argument("key file " + path + " holds no key");
  std::set<std::string> ids;
  for (const auto& k : keys) {
    if (!ids.insert(k.id).second) {
      throw std::invalid_argument("key file " + path + ": key id \"" + k.id + "\" repeats");
    }
  }
  return keys;
}

Sealer::Sealer(std::vector<SealingKey> keys) : keys_(std::move(keys)) {
  if (keys_.empty()) throw std::invalid_argument("a sealer needs at least one key");
  std::set<std::string> ids;
  for (const auto& k : keys_) {
    if (!ids.insert(k.id).second) throw std::invalid_argument("key id repeats: " + k.id);
  }
}

std::string Sealer::seal(std::string_view plaintext, std::string_view context) const {
  const auto& key = keys_.front();
  std::string out(kNonce + plaintext.size() + kTag, '\0');
  auto* nonce = reinterpret_cast<unsigned char*>(out.data());
  if (RAND_bytes(nonce, kNonce) != 1) throw std::runtime_error("RAND_bytes failed");
  auto ctx = new_ctx();
  int n = 0;
  if (EVP_EncryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key.bytes.data(), nonce) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nullptr, &n, as_bytes(context),
                        static_cast<int>(context.size())) != 1 ||
      EVP_EncryptUpdate(ctx.get(), nonce + kNonce, &n, as_bytes(plaintext),
                        static_cast<int>(plaintext.size())) != 1 ||
      EVP_EncryptFinal_ex(ctx.get(), nonce + kNonce + n, &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_GET_TAG, kTag,
                          nonce + kNonce + plaintext.size()) != 1) {
    throw std::runtime_error("AES-256-GCM sealing failed");
  }
  return out;
}

std::optional<std::string> Sealer::open(std::string_view key_id, std::string_view sealed,
                                        std::string_view context) const {
  const SealingKey* key = nullptr;
  for (const auto& k : keys_) {
    if (k.id == key_id) key = &k;
  }
  if (key == nullptr || sealed.size() < kNonce + kTag) return std::nullopt;
  const auto* nonce = as_bytes(sealed);
  const std::size_t length = sealed.size() - kNonce - kTag;
  std::string out(length, '\0');
  auto* plain = reinterpret_cast<unsigned char*>(out.data());
  std::array<unsigned char, kTag> tag;
  std::copy_n(nonce + kNonce + length, kTag, tag.begin());
  auto ctx = new_ctx();
  int n = 0;
  if (EVP_DecryptInit_ex(ctx.get(), EVP_aes_256_gcm(), nullptr, key->bytes.data(), nonce) != 1 ||
      EVP_DecryptUpdate(ctx.get(), nullptr, &n, as_bytes(context),
                        static_cast<int>(context.size())) != 1 ||
      EVP_DecryptUpdate(ctx.get(), plain, &n, nonce + kNonce, static_cast<int>(length)) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_GCM_SET_TAG, kTag, tag.data()) != 1 ||
      EVP_DecryptFinal_ex(ctx.get(), plain + n, &n) != 1) {
    return std::nullopt;
  }
  return out;
}

}  // namespace idemproxy::store
