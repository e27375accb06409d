#pragma once
// The request fingerprint that detects a key reused with another request.
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "idemproxy/common/sha256.hpp"

namespace idemproxy::engine {

/// How deep JSON is canonicalised by default (server.max_json_depth).
inline constexpr std::size_t kMaxJsonDepth = 128;

/// The canonical form of a JSON text (RFC 8259): members sorted by name (duplicates
/// all kept, in order), no insignificant whitespace, strings with minimal escapes,
/// numbers exact from their text. nullopt when the text is not JSON or nests deeper
/// than `max_depth`. Iterative: no input can exhaust the stack.
std::optional<std::string> canonicalize_json(std::string_view body, std::size_t max_depth);

/// canonicalize_json with the default depth, or the input unchanged.
std::string canonical_json(std::string_view body);

/// True when a Content-Type names JSON (`application/json`, `application/*+json`).
bool is_json_content_type(std::string_view content_type);

/// Hex SHA-256 over method, target (path with query) and body; JSON bodies are
/// canonicalised first so key order and whitespace do not matter. A JSON body that
/// is not valid, or nests deeper than `max_json_depth`, is fingerprinted by its bytes
/// (no canonical form equals such bytes, so the two never collide).
std::string fingerprint(std::string_view method, std::string_view target,
                        std::string_view content_type, std::string_view body,
                        std::size_t max_json_depth = kMaxJsonDepth);

/// Hex SHA-256 of arbitrary bytes (used to log keys without revealing them).
using idemproxy::sha256_hex;

/// Hex HMAC-SHA256 of `data` under `key`: a scope derived from a credential that
/// cannot be turned back into it, nor forged without the key.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

}  // namespace idemproxy::engine
