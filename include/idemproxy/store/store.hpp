#pragma once
// The narrow interface between the idempotency engine and where records live.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "idemproxy/common/clock.hpp"

namespace idemproxy::store {

/// A record is identified by (scope, key).
struct RecordId {
  std::string scope;
  std::string key;
};

/// One string per record (scope '\n' key), for in-process maps: a key is printable
/// ASCII (engine::parse_key), so no two records share one. The purge notification's
/// payload has the same form.
inline std::string slot_key(const RecordId& id) { return id.scope + '\n' + id.key; }

/// in_flight: claimed, executing (or its holder vanished, once the lease ran out).
/// completed: the response is stored and replayed. released: a retry executes again.
/// indeterminate: the upstream got the request but the outcome is unknown.
enum class RecordState { in_flight, completed, released, indeterminate };
std::string_view to_string(RecordState state);
std::optional<RecordState> parse_state(std::string_view text);

struct Header {
  std::string name;
  std::string value;
  bool operator==(const Header&) const = default;
};

/// What the upstream answered, as kept for replay.
/// The executing request's trace id travels among a stored response's headers under
/// this name, which no HTTP field can have (a field-name is a token, RFC 9110 5.1):
/// replays never send it; their log lines name it as original_trace_id.
inline constexpr std::string_view kTraceIdEntry = ":trace-id";
/// The executing request's span id (16 lowercase hex digits), beside kTraceIdEntry when
/// that request's span was recorded: a replay's span links to it.
inline constexpr std::string_view kSpanIdEntry = ":span-id";

struct StoredResponse {
  int status = 0;
  std::vector<Header> headers;
  std::string body;
  /// False when the answer was larger than upstream.max_response_size: the record
  /// keeps only the status, and is never replayed (a replay would be truncated).
  bool body_stored = true;
};

/// The trace and span ids of the request that executed, as a stored response keeps
/// them (views into it).
struct ExecutingSpan {
  std::string_view trace_id;
  std::string_view span_id;
};
/// Both ids, or nullopt when either is absent or empty: records written before spans
/// were recorded, or while tracing was off.
std::optional<ExecutingSpan> executing_span(const StoredResponse& stored);

struct Record {
  RecordId id;
  std::string fingerprint;
  RecordState state = RecordState::in_flight;
  std::int64_t token = 0;
  std::string route;
  std::string method;
  std::string target;
  TimePoint created_at;
  TimePoint locked_until;  // meaningful while in flight
  TimePoint expires_at;
  TimePoint completed_at;                  // meaningful once completed
  bool expired = false;                    // judged by the store's clock when the record was read
  TimePoint store_now;                     // the store's clock when the record was read
  bool stale = false;                      // in flight with its lease run out: the holder vanished
  std::optional<StoredResponse> response;  // set when completed
  /// The id of the key that sealed the stored fields (store.encryption); unset when
  /// they are in the clear.
  std::optional<std::string> sealed_with;
};

struct ClaimRequest {
  RecordId id;
  std::string fingerprint;
  Duration lease{};
  Duration ttl{};
  std::string route;
  std::string method;
  std::string target;
  /// Take over a record whose lease ran out (in flight or indeterminate) instead of
  /// reporting it: the route's on_stale: retake.
  bool retake_stale = false;
  /// The route's after_expiry: reject. A completed record kept past `ttl` (its
  /// expiry is the tombstone's) answers `expired` instead of replaying.
  bool tombstones = false;
};

/// The caller now holds the record under this fencing token.
struct Claimed {
  std::int64_t token = 0;
  TimePoint locked_until;
  bool took_over = false;  // from a holder whose lease ran out (on_stale: retake)
};

/// Either the caller won the claim, or a live record already exists.
using ClaimResult = std::variant<Claimed, Record>;

enum class StoreErrc {
  unavailable,  // the store did not answer; nothing is known
  fenced,       // the caller's token is no longer current
  unreadable,   // the record exists but cannot be opened (unknown key, or altered)
};

struct StoreError {
  StoreErrc code = StoreErrc::unavailable;
  std::string detail;
};

/// A value or the store error that prevented it.
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(StoreError error) : v_(std::move(error)) {}
  bool ok() const { return v_.index() == 0; }
  T& value() { return std::get<0>(v_); }
  const T& value() const { return std::get<0>(v_); }
  const StoreError& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, StoreError> v_;
};

struct Done {};

/// Where idempotency records live. Implementations are thread-safe and may block;
/// the proxy calls them from its database pool, never from an I/O thread (except
/// claim_async and complete_async on a store that queues_calls()).
class Store {
 public:
  virtual ~Store() = default;

  /// Atomically claims `id` unless a live record holds it. A released record, an
  /// expired one that no live holder has (an in-flight record is live until its
  /// lease runs out, whatever its TTL), or, with retake_stale, one whose lease ran
  /// out is claimed anew under a new token.
  virtual Result<ClaimResult> claim(const ClaimRequest& request) = 0;
  /// Stores the response and starts the TTL; only the holder of `token` may.
  virtual Result<TimePoint> complete(const RecordId& id, std::int64_t token,
                                     const StoredResponse& response, Duration ttl) = 0;

  /// claim() and complete() answered through a callback instead of a blocked
  /// thread. A store that queues them (queues_calls()) returns at once and calls
  /// `done` later, on a thread of its own, so the caller may be an I/O thread; the
  /// arguments must stay alive until `done` is called. Otherwise `done` is called
  /// here, after the blocking call.
  using ClaimDone = std::function<void(Result<ClaimResult>)>;
  using CompleteDone = std::function<void(Result<TimePoint>)>;
  // Sinks, which the overrides keep:
  // NOLINTBEGIN(performance-unnecessary-value-param)
  virtual void claim_async(const ClaimRequest& request, ClaimDone done) { done(claim(request)); }
  virtual void complete_async(const RecordId& id, std::int64_t token,
                              const StoredResponse& response, Duration ttl, CompleteDone done) {
    done(complete(id, token, response, ttl));
  }
  // NOLINTEND(performance-unnecessary-value-param)
  /// Whether claim_async and complete_async return without blocking.
  virtual bool queues_calls() const { return false; }
  /// Extends the holder's lease to now + `lease` (its heartbeat while the upstream
  /// works); returns the new end. Fenced when `token` no longer holds the record.
  virtual Result<TimePoint> renew(const RecordId& id, std::int64_t token, Duration lease) = 0;
  /// Gives the claim up so a retry executes again; only the holder of `token` may.
  virtual Result<Done> release(const RecordId& id, std::int64_t token) = 0;
  /// Records that the upstream got the request but the outcome is unknown; only the
  /// holder of `token` may. The record keeps its lease and TTL.
  virtual Result<Done> mark_indeterminate(const RecordId& id, std::int64_t token) = 0;
  /// Operator decision: an indeterminate or stale record becomes released, so the
  /// next request with the key executes. False when there was no such record.
  virtual Result<bool> resolve(const RecordId& id) = 0;
  virtual Result<std::optional<Record>> find(const RecordId& id) = 0;
  /// The most recently created records, newest first, optionally in one state.
  /// Stored headers and bodies are not loaded.
  virtual Result<std::vector<Record>> list(std::optional<RecordState> state, int limit) = 0;
  /// Deletes one record; false when there was none.
  virtual Result<bool> purge(const RecordId& id) = 0;
  /// Deletes up to `limit` expired records; returns how many. While another instance
  /// is deleting, returns 0.
  virtual Result<std::int64_t> delete_expired(int limit) = 0;
  /// Turns up to `limit` of `route`'s completed records whose answer is older than
  /// `ttl` into tombstones: the stored fields and body are dropped; the fingerprint,
  /// status and times stay until the record expires (after_expiry: reject). Returns
  /// how many. While another instance is at it, returns 0.
  virtual Result<std::int64_t> drop_answers(const std::string& /*route*/, Duration /*ttl*/,
                                            int /*limit*/) {
    return std::int64_t{0};
  }
  virtual Result<Done> ping() = 0;
  /// How many records are indeterminate now (an operator must decide each one).
  virtual Result<std::int64_t> count_indeterminate() = 0;

  /// What the store announces about records that any instance (or the CLI) changed.
  /// Both are called from a background thread.
  struct Watchers {
    /// A record was purged: caches drop it.
    std::function<void(const RecordId&)> purged;
    /// A watched record (watch_record) finished: completed, released or marked
    /// indeterminate. Requests waiting for it on this instance wake.
    std::function<void(const RecordId&)> finished;
    /// Announcements (re)started after a gap in which some may have been lost (the
    /// listener's connection broke): every waiter should look again.
    std::function<void()> resumed;
  };
  /// Starts announcing to `watchers`; empty watchers stop it. Stores that cannot
  /// announce anything ignore it.
  // NOLINTNEXTLINE(performance-unnecessary-value-param): a sink; overrides keep it.
  virtual void watch(Watchers /*watchers*/) {}
  /// Whether Watchers::finished is called for watched records. When it is not,
  /// requests waiting for another instance's key re-check it on a backoff.
  virtual bool announces_finishes() const { return false; }
  /// Asks for `id`'s finish to be announced: a request here waits for it while
  /// another instance executes it. False when it is no longer in flight (the
  /// waiter claims again at once).
  virtual Result<bool> watch_record(const RecordId& /*id*/) { return false; }

  /// A figure the store reports about itself (pool, batching), rendered as a metric.
  struct Sample {
    const char* name;  // with its labels
    const char* help;
    double value = 0;
    bool counter = false;  // a total since start; otherwise a gauge
  };
  virtual std::vector<Sample> stats() { return {}; }
};

/// Encodes headers as "Name: value\r\n" lines, the form they take on the wire.
std::string encode_headers(const std::vector<Header>& headers);
std::vector<Header> decode_headers(std::string_view block);

}  // namespace idemproxy::store
