#pragma once
// The request fingerprint that detects a key reused with another request.
#include <string>
#include <string_view>

namespace idemproxy::engine {

/// Returns the canonical form of a JSON text (sorted keys, no insignificant
/// whitespace), or the input unchanged when it is not valid JSON.
std::string canonical_json(std::string_view body);

/// True when a Content-Type names JSON (`application/json`, `application/*+json`).
bool is_json_content_type(std::string_view content_type);

/// Hex SHA-256 over method, target (path with query) and body; JSON bodies are
/// canonicalised first so key order and whitespace do not matter.
std::string fingerprint(std::string_view method, std::string_view target,
                        std::string_view content_type, std::string_view body);

/// Hex SHA-256 of arbitrary bytes (used to log keys without revealing them).
std::string sha256_hex(std::string_view data);

/// Hex HMAC-SHA256 of `data` under `key`: a scope derived from a credential that
/// cannot be turned back into it, nor forged without the key.
std::string hmac_sha256_hex(std::string_view key, std::string_view data);

}  // namespace idemproxy::engine
