#pragma once
// Per-route idempotency policy and the table that maps a request path to it.
#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/engine/fingerprint_rule.hpp"
#include "idemproxy/ops/gc.hpp"
#include "idemproxy/store/record.hpp"

namespace idemproxy::engine {

enum class OnConcurrent { reject, wait };
enum class StoreUnavailable { fail_closed, fail_open };
/// What a retry meets when the key's holder vanished (lease over) or the outcome is
/// indeterminate. fail: at most once, the retry is told the outcome is unknown.
/// retake: execute again under a new fencing token (the upstream dedupes itself).
enum class OnStale { fail, retake };
/// enforce: idempotency as documented. shadow: record and fingerprint as usual, but
/// never block or replay; forward everything and count what enforce would have done.
enum class Mode { enforce, shadow };
/// Where a record's scope comes from: a header the caller sets (scope_header), or
/// the caller's verified credentials: a keyed HMAC of Authorization (never the raw
/// value), or the subject of the client certificate verified by mTLS.
enum class ScopeFrom { header, authorization, client_cert };

/// An inclusive range of statuses: "2xx" is 200..299, "201" is 201..201.
struct StatusRange {
  int low = 0;
  int high = 0;
};

/// `statuses`: the HTTP status of some refusals. The problem type stays, so a client
/// that reads the type keeps working (the IETF httpapi working group's issue #42:
/// 422 collides with an application's own validation errors). Each is 4xx or 5xx.
struct RefusalStatuses {
  int missing_key = 400;
  int mismatch = 422;
  int in_flight = 409;
  int store_unavailable = 503;
  int expired = 409;
};

struct RoutePolicy {
  std::string name = "default";
  std::string path_prefix = "/";
  bool case_sensitive = true;  // false: /V1/Orders matches path_prefix /v1/orders
  bool enabled = true;
  std::string header = "Idempotency-Key";
  std::vector<std::string> methods = {"POST", "PATCH"};
  bool key_required = false;
  Duration ttl = std::chrono::hours{24};
  Duration lease = std::chrono::seconds{30};
  std::string scope_header;
  ScopeFrom scope_from = ScopeFrom::header;
  OnConcurrent on_concurrent = OnConcurrent::reject;
  OnStale on_stale = OnStale::fail;
  Mode mode = Mode::enforce;
  std::vector<StatusRange> store_status = {{200, 299}, {400, 499}};
  /// gRPC calls are stored by their grpc-status, never by the HTTP status (always
  /// 200): OK, INVALID_ARGUMENT, NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED,
  /// FAILED_PRECONDITION, OUT_OF_RANGE, UNIMPLEMENTED, UNAUTHENTICATED.
  std::vector<int> store_grpc_status = {0, 3, 5, 6, 7, 9, 11, 12, 16};
  StoreUnavailable store_unavailable = StoreUnavailable::fail_closed;
  std::size_t max_body = std::size_t{1} << 20;
  /// `max_stored_answer`: the largest streamed answer kept for replay, in chunks. A
  /// larger one still reaches its client whole, and its record keeps the status only
  /// (retries get 409 response-not-stored).
  std::uint64_t max_stored_answer = std::uint64_t{1} << 30;
  std::vector<std::string> deny_headers = {"Set-Cookie"};
  /// Each forwarded request carries Idempotency-Fencing-Token: the claim's token,
  /// which strictly increases for a key across takeovers and instances, so the
  /// upstream can refuse a late writer (docs/RELIABILITY.md).
  bool forward_fencing_token = false;
  /// `namespace`: folded into each record's scope ("ns:<namespace>:<scope>"), so a
  /// route whose request schema changed (namespace v2) never replays, or refuses as
  /// a mismatch, what an older one stored. Letters, digits, '.', '_' and '-'.
  std::string key_namespace;
  /// `key_json_pointer`: an RFC 6901 pointer into a JSON body where the key is when
  /// the request has no `header` (which wins when present), e.g. /id for a webhook.
  std::string key_json_pointer;
  RefusalStatuses statuses;
  /// `after_expiry: reject`: once `ttl` has passed, a retry is refused (`expired`)
  /// instead of executing again, for as long as the record's tombstone lasts
  /// (`tombstone_ttl`, longer than ttl): its fingerprint, status and completion time,
  /// without the answer, which GC drops after ttl. `execute` (false) is the usual
  /// behaviour: after ttl the key is free.
  bool after_expiry_reject = false;
  Duration tombstone_ttl{0};
  /// `max_key_age`: a UUIDv7 key (RFC 9562 5.7) minted longer ago than this is
  /// refused as `expired`; 0 turns it off. Other keys are not judged.
  Duration max_key_age{0};

  /// `fingerprint`: what of a request decides whether a reuse of its key is a
  /// mismatch; by default the whole body and query, and no header field.
  FingerprintRule fingerprint;
  /// `quota`: caps on each scope's (tenant's) stored records, stored bytes and claims
  /// in flight; a new key over a cap is refused (429 quota-exceeded). None by default.
  store::Quota quota;
  /// `max_ttl`: how far an answer's Idempotency-Policy: max-age may lengthen ttl; 0
  /// means ttl itself, so max-age may only shorten it.
  Duration max_ttl{0};
  Duration longest_ttl() const { return max_ttl.count() > 0 ? max_ttl : ttl; }

  /// How long the store keeps a completed answer and its record: the answer for ttl,
  /// or for `max_age` (what its upstream asked) up to max_ttl; the record as long.
  /// With after_expiry: reject its tombstone follows the answer, never shorter than
  /// (tombstone_ttl - ttl) and never gone before tombstone_ttl: an answer kept for
  /// less than ttl is refused sooner, never executed again sooner.
  store::Retention retention(std::optional<Duration> max_age = std::nullopt) const {
    const Duration answer = max_age ? std::min(*max_age, longest_ttl()) : ttl;
    if (!after_expiry_reject) return {answer, answer};
    return {answer, std::max(tombstone_ttl, answer + (tombstone_ttl - ttl))};
  }
  bool covers_method(std::string_view method) const;
  /// Whether this route still serves while the store is unreachable: disabled, in
  /// shadow mode, or store_unavailable: fail_open. /readyz stays 200 when all do.
  bool serves_without_store() const {
    return !enabled || mode == Mode::shadow || store_unavailable == StoreUnavailable::fail_open;
  }
  /// Whether a response with this status is stored and replayed. 408, 409, 425 and
  /// 429 say "try again later" and are never stored, whatever the ranges say.
  bool stores_status(int status) const;
  /// Whether a gRPC answer with this status is stored; the statuses that say "try
  /// again" (grpc_status_retryable) never are.
  bool stores_grpc_status(int code) const;
  /// Whether a response header may be kept in the record (case-insensitive).
  bool denies_header(std::string_view name) const;
};

/// Routes in configuration order; the first whose prefix matches wins.
class RouteTable {
 public:
  explicit RouteTable(std::vector<RoutePolicy> routes) : routes_(std::move(routes)) {}
  /// The route for a request target (query ignored), or nullptr for pass-through.
  /// The HTTP layer passes the normalised path (http/request_target.hpp).
  const RoutePolicy* match(std::string_view target) const;
  const std::vector<RoutePolicy>& routes() const { return routes_; }

 private:
  std::vector<RoutePolicy> routes_;
};

/// Parses "2xx" or "201"; returns false on anything else.
bool parse_status_range(std::string_view text, StatusRange& out);

/// The routes whose records become tombstones after ttl (after_expiry: reject), as
/// garbage collection takes them.
std::vector<ops::TombstoneRoute> tombstone_routes(const std::vector<RoutePolicy>& routes);

}  // namespace idemproxy::engine
