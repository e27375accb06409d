#pragma once
// Encryption at rest: AES-256-GCM over stored fields, under a ring of named keys.
// The first key seals; every key in the ring opens, so keys can rotate while old
// records stay readable.
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::store {

struct SealingKey {
  std::string id;  // 1-32 of [A-Za-z0-9._-]; kept in each record it sealed
  std::array<unsigned char, 32> bytes{};
};

/// Reads a key file: one `ID:HEX` line per key (64 hex digits, 32 bytes), newest
/// first; blank lines and `#` comments are skipped. Throws std::invalid_argument
/// naming the line.
std::vector<SealingKey> read_key_file(const std::string& path);

class Sealer {
 public:
  /// Throws std::invalid_argument when the ring is empty or an id repeats.
  explicit Sealer(std::vector<SealingKey> keys);

  /// The id of the key seal() uses.
  const std::string& current_id() const { return keys_.front().id; }

  /// nonce(12) || ciphertext || tag(16). `context` is authenticated but not stored:
  /// a sealed value only opens under the same context (the record and field it
  /// was sealed for), so it cannot be moved to another record.
  std::string seal(std::string_view plaintext, std::string_view context) const;

  /// The plaintext, or nullopt when the key id is unknown or the value or its
  /// context was altered.
  std::optional<std::string> open(std::string_view key_id, std::string_view sealed,
                                  std::string_view context) const;

 private:
  std::vector<SealingKey> keys_;
};

}  // namespace idemproxy::store
