#pragma once
// The published idempotency policy (draft-ietf-httpapi-idempotency-key-header: the
// resource MUST publish its policy, expiry included, and each error SHOULD point to
// it). Generated from the configuration, never written by hand: `listen` serves it at
// policy.path, and `idemproxy policy` prints the same document.
#include <memory>

#include "http/settings.hpp"
#include "idemproxy/config/config.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

PublishedPolicy publish_policy(const config::Config& config);

/// The settings snapshot for `config`, its policy published.
std::shared_ptr<const Settings> make_settings(config::Config config);

}  // namespace idemproxy::proxy
