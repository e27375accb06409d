#pragma once
// Records as operators see them: the JSON that `idemproxy keys ...` prints and the
// admin API returns. One implementation for both.
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "idemproxy/store/maintenance.hpp"
#include "idemproxy/store/views.hpp"

namespace idemproxy::ops {

/// `summary` leaves out the stored headers (used for lists).
nlohmann::json record_to_json(const store::Record& record, bool summary = false);

/// An operator action on one record, with what to tell the operator.
// (NOLINT: nlohmann::json's noexcept move calls assert_invariant(), which tidy
// cannot see does not throw.)
struct RecordAction {  // NOLINT(bugprone-exception-escape)
  enum class Status { ok, bad_request, not_found, store_error } status = Status::ok;
  nlohmann::json body;
};

/// With `with_body`, the stored body too: as `body` when it is UTF-8, else as
/// `body_base64`; never for a sealed record (store.encryption), whose body stays
/// withheld (`body_withheld` says why).
RecordAction show_record(store::Views& store, const store::RecordId& id, bool with_body = false);
/// Purge and resolve change what the next request with the key does: each logs an
/// audit line naming `via` (the admin API or the CLI), the scope and a hash of the
/// key (never the key), and what happened.
RecordAction purge_record(store::Maintenance& store, const store::RecordId& id,
                          std::string_view via);
RecordAction resolve_record(store::Maintenance& store, const store::RecordId& id,
                            std::string_view via);
/// `state` empty means any state.
RecordAction list_records(store::Views& store, const std::string& state, int limit);
/// The scopes nearest their quota's caps, fullest first: each one's usage, and the
/// caps its latest claim carried (null: no cap).
RecordAction list_quotas(store::Views& store, int limit);

/// A listing's limit as the CLI (--limit) and the admin API (?limit=) take it: a
/// number from 1 to 1000; nothing otherwise.
std::optional<int> parse_limit(std::string_view text);

}  // namespace idemproxy::ops
