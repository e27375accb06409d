#pragma once
// The published idempotency policy (draft-ietf-httpapi-idempotency-key-header: the
// resource MUST publish its policy, expiry included, and each error SHOULD point to
// it). Generated from the configuration, never written by hand: `listen` serves it at
// policy.path, and `idemproxy policy` prints the same document.
#include <string>

#include "idemproxy/config/config.hpp"

namespace idemproxy::http {

struct PublishedPolicy {
  /// For each enabled route: its methods, key source, expiry, lease, concurrency and
  /// storage rules, and every error with its status and meaning (JSON, indented).
  std::string json;
  /// The same document as a page for a person (Accept: text/html).
  std::string html;
  /// The Link field value for covered routes' problems and stored answers
  /// (RFC 8288 section 3): `<target>; rel="describedby"`, or "" when nothing is
  /// published.
  std::string link;
};

PublishedPolicy publish_policy(const config::Config& config);

}  // namespace idemproxy::http
