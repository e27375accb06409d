#pragma once
// The idempotency state machine: what to do with a request that carries a key,
// and what to do with the upstream's answer. It knows records, not SQL or sockets.
#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "idemproxy/engine/policy.hpp"
#include "idemproxy/store/claims.hpp"

namespace idemproxy::engine {

/// The engine's verdict on a keyed request.
struct Admission {
  enum class Kind {
    execute,        // we hold the claim: forward, then finish()
    replay,         // a completed record with the same fingerprint
    in_flight,      // another request with this key is still executing
    stale,          // its holder vanished (lease over, on_stale: fail): outcome unknown
    indeterminate,  // the upstream got it, the outcome is unknown (on_stale: fail)
    mismatch,       // the key was used with a different request
    store_failed,   // the store did not answer
    unreadable,     // a record exists but cannot be opened (encryption key missing, altered)
    not_stored,     // it executed, but its answer was too large to store: no replay
    expired,        // after_expiry: reject, and its ttl has passed: a tombstone
    over_quota,     // a new key, and its scope is at a cap of the route's quota
  };
  Kind kind = Kind::store_failed;
  std::int64_t token = 0;                       // execute; replay, in_flight: the record's
  std::optional<store::StoredResponse> replay;  // replay; not_stored: the status only
  /// in_flight: the head of the answer its holder streams, once it does
  /// (store::Record::streaming).
  std::optional<store::StoredResponse> streaming;
  TimePoint expires_at;    // replay
  TimePoint store_now;     // replay: the store's clock at the time
  TimePoint completed_at;  // expired: when the original completed
  TimePoint locked_until;  // execute, in_flight
  bool took_over = false;  // execute: from a vanished holder
  std::string detail;      // store_failed, unreadable
  /// mismatch, when the record was fingerprinted under another rule (a reload, or
  /// another instance's config): the record, to judge again once the request is
  /// fingerprinted under its rule (fingerprint_rule.hpp). Apart: a record is 624
  /// bytes, which every verdict carried through each of its moves.
  std::unique_ptr<store::Record> other_rule;
  /// over_quota: which cap, the scope's usage and the caps.
  store::OverQuota quota;
};

/// What finish() did with the upstream's answer.
enum class Finish {
  stored,         // completed: retries will replay it
  released,       // status not storable: retries execute again
  indeterminate,  // recorded as indeterminate
  fenced,         // another holder took the claim over; nothing written
  store_failed,   // not written; the claim stays until its lease runs out
};

/// An answer as its record keeps it (Engine::keep): what a completion writes, and
/// what its retry in the background carries.
struct KeptAnswer {
  store::StoredResponse answer;  // the storable fields and trailers only
  store::Retention keep;         // the route's ttl, or what the upstream asked within max_ttl
  bool stores = true;            // false: a completion releases the claim instead
};

class Engine {
 public:
  explicit Engine(store::Claims& claims) : claims_(claims) {}

  /// Claims the key or explains why the request must not execute now.
  Admission admit(const store::ClaimRequest& request);
  /// What the store's answer to claiming `request` admits (admit() without the call).
  static Admission admission(const store::ClaimRequest& request,
                             store::Result<store::ClaimResult> result);

  /// Records the upstream's answer under `token`: stored when its status is
  /// storable (without hop-by-hop and denied headers), released otherwise.
  /// `expires_at`, when given, receives the record's expiry once stored, and
  /// `stored`, the response as it was stored (what a replay sends).
  Finish finish(const store::RecordId& id, std::int64_t token, const RoutePolicy& policy,
                const store::StoredResponse& response, TimePoint* expires_at = nullptr,
                store::StoredResponse* stored = nullptr);
  /// finish() of an answer already in its kept form (keep()).
  Finish finish(const store::RecordId& id, std::int64_t token, const KeptAnswer& kept,
                TimePoint* expires_at = nullptr);
  /// Whether the route stores this answer: by its HTTP status, or a gRPC answer by
  /// its grpc-status (store_grpc_status). Others release the claim, and so does an
  /// answer whose upstream opted out (Idempotency-Policy: no-store).
  static bool stores(const RoutePolicy& policy, const store::StoredResponse& response);
  /// The upstream's answer as its record keeps it, made from it in place: whether
  /// the route stores it and for how long (stores(), retention(), read in one walk
  /// of its fields), then its fields and trailers cut to the storable ones. The
  /// kept form no longer says what its upstream asked (Idempotency-Policy is not
  /// stored), so whatever needs that reads it here.
  static KeptAnswer keep(store::StoredResponse&& response, const RoutePolicy& policy);
  /// How long the record of `response` keeps its answer and itself: the route's
  /// ttl, or what its upstream asked (Idempotency-Policy: max-age) within max_ttl.
  static store::Retention retention(const RoutePolicy& policy,
                                    const store::StoredResponse& response);
  /// `expires_at` is the replay's expiry: the answer's end, not the tombstone's (the
  /// store keeps the record for keep.record).
  static Finish finished(const store::Result<TimePoint>& done, const store::Retention& keep,
                         TimePoint* expires_at);

  /// The holder's heartbeat: keeps the claim's lease running while the upstream
  /// works, so a short lease recovers fast from a crash and never frees the key of
  /// a holder that is alive. False when the claim is no longer held (or the store
  /// did not answer: the next beat tries again).
  bool renew(const store::RecordId& id, std::int64_t token, Duration lease);

  /// Gives up a claim whose request never reached the upstream.
  Finish abandon(const store::RecordId& id, std::int64_t token);

  /// The request reached the upstream, but no answer came back that can be stored.
  Finish mark_indeterminate(const store::RecordId& id, std::int64_t token);

 private:
  store::Claims& claims_;
};

/// Headers that describe one connection, not the message (RFC 9110 7.6.1, with the
/// proxy ones of RFC 7230 6.1 that old peers still send): never forwarded, never
/// stored. The one list both hops use (http::strip_hop_by_hop removes them, and any
/// header Connection names).
inline constexpr std::array<std::string_view, 8> kConnectionHeaders = {
    "connection", "keep-alive", "proxy-connection",   "te",
    "trailer",    "upgrade",    "proxy-authenticate", "proxy-authorization"};

/// True for the connection headers, plus the framing headers that a stored body gets
/// anew on replay.
bool is_hop_by_hop(std::string_view name);

/// The response field by which an upstream opts an answer out of storage
/// ("no-store"); it describes the exchange, so it is never stored or sent on.
inline constexpr std::string_view kPolicyField = "Idempotency-Policy";

/// What an answer's kPolicyField says, read from its comma-separated directives
/// (names case-insensitively): `no-store`, and `max-age=N`, the seconds this answer
/// is kept for replay (RoutePolicy::retention bounds it).
struct AnswerPolicy {
  bool no_store = false;
  std::optional<Duration> max_age;
  /// The first directive it could not read (an unknown one, or max-age without a
  /// number of seconds), for the log; empty when it read them all. Such a directive
  /// is ignored.
  std::string malformed;
};
/// One field value of kPolicyField.
AnswerPolicy read_answer_policy(std::string_view value);
/// Every kPolicyField field of `headers`, read together.
AnswerPolicy answer_policy(const std::vector<store::Header>& headers);

/// Until when a completed record replays: its expiry, or with after_expiry: reject
/// (`tombstones`), where it outlives its answer as a tombstone, the end of the
/// window it completed with (the route's `ttl` after it completed, for a record
/// completed before the store kept that) if that comes first.
inline TimePoint replay_until(const store::Record& r, bool tombstones, Duration ttl) {
  if (!tombstones) return r.expires_at;
  return std::min(r.expires_at, r.replay_until.value_or(r.completed_at + ttl));
}

/// Cuts `headers` to those that may be stored for replay under `policy`, in place.
void keep_storable(std::vector<store::Header>& headers, const RoutePolicy& policy);

}  // namespace idemproxy::engine
