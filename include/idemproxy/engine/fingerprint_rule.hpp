#pragma once
// What a route's fingerprint covers (the `fingerprint` section): which members of a
// JSON body, which query parameters and which request header fields. A record keeps
// the rule it was fingerprinted under, so a retry is compared under that rule even
// after a reload or on an instance that runs another config.
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace idemproxy::engine {

struct FingerprintRule {
  enum class Query { all, none, listed };
  /// RFC 6901 pointers into a JSON body: only these members count (in this order),
  /// each present with its value or absent. Empty: the whole body.
  std::vector<std::string> include;
  /// Pointers removed from a JSON body before it counts; never with `include`.
  std::vector<std::string> exclude;
  Query query = Query::all;
  std::vector<std::string> query_params;  // Query::listed: these, by name
  /// Request header fields that count (lower-case names); none by default.
  std::vector<std::string> headers;

  /// The whole body, the whole query, no header field: what every record was
  /// fingerprinted under before rules, and still is by default.
  bool is_default() const {
    return include.empty() && exclude.empty() && query == Query::all && headers.empty();
  }
  /// The rule as compact JSON, which a record keeps ahead of its digest; empty for
  /// the default rule, whose records keep the digest alone.
  std::string spelling() const;
  /// The rule of a spelling; nullopt when it is not one.
  static std::optional<FingerprintRule> from_spelling(std::string_view spelling);
  bool operator==(const FingerprintRule&) const = default;
};

/// The parts of a request a fingerprint reads. `header` gives a field's values (every
/// line of it, joined by ", "), or "" when it is absent.
struct RequestParts {
  std::string_view method;
  std::string_view target;  // path and query
  std::string_view content_type;
  std::string_view body;
  std::function<std::string(std::string_view name)> header;
};

/// The fingerprint of a request under `rule`. Under the default rule, exactly
/// fingerprint() (a hex SHA-256); under any other, the rule's spelling followed by
/// the hex SHA-256 of what it covers. A JSON pointer reaches into arrays by index; a
/// member that is absent and one that is null differ. A body that is not JSON, or
/// not valid JSON, counts by its bytes.
std::string fingerprint(const FingerprintRule& rule, const RequestParts& request,
                        std::size_t max_json_depth);

/// The rule a stored fingerprint was made under: the default for a bare digest;
/// nullopt when its spelling cannot be read.
std::optional<FingerprintRule> rule_of(std::string_view stored_fingerprint);

/// Whether two fingerprints were made under the same rule.
bool same_rule(std::string_view a, std::string_view b);

}  // namespace idemproxy::engine
