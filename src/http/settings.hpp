#pragma once
// A consistent snapshot of the configuration and what is built from it. A reload
// makes a new one; a connection and each of its requests keep the one they started
// with for as long as they run.
#include <string>
#include <utility>

#include "idemproxy/config/config.hpp"
#include "idemproxy/engine/policy.hpp"

namespace idemproxy::http {

/// The published idempotency policy (draft-ietf-httpapi-idempotency-key-header: the
/// resource MUST publish its policy, and each error SHOULD point to it), generated
/// from the configuration by proxy/policy_document.hpp.
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

struct Settings {
  Settings(config::Config c, PublishedPolicy p)
      : config(std::move(c)), routes(config.routes), policy(std::move(p)) {}
  config::Config config;
  engine::RouteTable routes;
  PublishedPolicy policy;  // served at policy.path; its link on covered routes' answers
};

}  // namespace idemproxy::http
