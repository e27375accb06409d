#pragma once
// Parsing of the Idempotency-Key header value.
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "idemproxy/common/clock.hpp"

namespace idemproxy::engine {

inline constexpr std::size_t kMaxKeyLength = 255;

/// Why a key was refused; the text is safe to show to the client.
struct KeyError {
  std::string reason;
};

/// Accepts a bare token (`abc`) or an RFC 8941 sf-string (`"abc"`); both mean `abc`.
/// The result is 1..255 printable ASCII characters. A List, an Inner List or a
/// Dictionary (`a, b`, `(a b)`, `k="v"`) is refused: the field is an Item (RFC 8941
/// §3.3).
std::variant<std::string, KeyError> parse_key(std::string_view header_value);

/// Why `key` breaks the rules every key obeys, whatever its source (1 to 255
/// printable ASCII characters), or nothing when it keeps them.
std::optional<std::string> key_rule_error(std::string_view key);

/// When a UUIDv7 key was minted: its first 48 bits are Unix milliseconds (RFC 9562
/// section 5.7). Nothing for any other key, including other UUID versions.
std::optional<TimePoint> uuid7_time(std::string_view key);

/// A key from the JSON body (key_json_pointer): found, absent (the document has no
/// value there), or refused: the body is not JSON, or the value is neither a string
/// nor an integer, or breaks the key's rules (1..255 printable ASCII). An integer
/// is its decimal text. The reason names the pointer and is safe to show.
struct BodyKey {
  enum class Found { key, absent, refused };
  Found found = Found::absent;
  std::string key;
  std::string reason;
};
BodyKey key_from_json(std::string_view body, const std::string& pointer);

/// Why `pointer` is not an RFC 6901 JSON pointer naming a member (it must start
/// with /), or nothing when it is one.
std::optional<std::string> json_pointer_error(const std::string& pointer);

/// The scope of a record whose route takes it from a header the client sets. Scopes
/// from verified sources are written `cert:...` (client certificate) and `hmac:...`
/// (Authorization), and a route's namespace is written `ns:<namespace>:`; a header's
/// value that starts with one of those, or with `header:`, is prefixed with
/// `header:`, so no header can name another source's
/// scope (one client could otherwise block or probe another's keys). Other values
/// are kept as they are, so records stored before this rule keep their scope. The
/// map is one-to-one: two header values never share a scope.
std::string header_scope(std::string_view value);

}  // namespace idemproxy::engine
