#pragma once
// What the store keeps and answers: records, claims, and its errors as values. The
// roles a store plays are in claims.hpp, watches.hpp, views.hpp and maintenance.hpp.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "idemproxy/common/clock.hpp"
#include "idemproxy/common/header.hpp"

namespace idemproxy::store {

/// A record is identified by (scope, key).
struct RecordId {
  std::string scope;
  std::string key;
};

/// One string per record (scope '\n' key), for in-process maps: a key is printable
/// ASCII (engine::parse_key), so no two records share one. The purge notification's
/// payload has the same form.
inline std::string slot_key(const RecordId& id) {
  std::string slot;
  slot.reserve(id.scope.size() + 1 + id.key.size());  // one heap block, not two
  slot.append(id.scope).append(1, '\n').append(id.key);
  return slot;
}

/// SlotHash's seed: drawn once per process (record.cpp).
std::uint64_t slot_hash_seed();

/// A slot key or a record's id hashed alike, without building the key (a heap block
/// per call): both walk scope, '\n' and key in place. Transparent, so a map of slot
/// keys is searched by RecordId.
struct SlotHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view slot) const {
    Words h;
    h.add(slot);
    return h.done();
  }
  std::size_t operator()(const RecordId& id) const {
    Words h;
    h.add(id.scope);
    h.add("\n");
    h.add(id.key);
    return h.done();
  }

 private:
  /// The bytes eight at a time, whatever pieces they come in (a word that straddles
  /// two is gathered first), each word mixed in by a multiply as FNV-1a mixes a byte
  /// (a byte at a time was 200 instructions for a 45-byte slot), from a seed drawn
  /// once per process: which keys collide cannot be worked out in advance.
  class Words {
   public:
    void add(std::string_view s) {
      length_ += s.size();
      const char* p = s.data();
      std::size_t n = s.size();
      for (; held_ != 0 && n > 0; --n) take(*p++);
      for (; n >= 8; p += 8, n -= 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        mix(w);
      }
      for (; n > 0; --n) take(*p++);
    }
    std::size_t done() {
      if (held_ != 0) {
        std::memset(buf_ + held_, 0, 8 - held_);
        std::uint64_t w;
        std::memcpy(&w, buf_, 8);
        mix(w);
      }
      // The length tells "a" from "a\0"; MurmurHash3's finalizer spreads the high
      // bits into the low ones, which an index takes.
      std::uint64_t h = h_ ^ length_;
      h ^= h >> 33;
      h *= 0xff51afd7ed558ccdULL;
      h ^= h >> 33;
      h *= 0xc4ceb9fe1a85ec53ULL;
      h ^= h >> 33;
      return static_cast<std::size_t>(h);
    }

   private:
    void take(char c) {
      // held_ is below 8 here; the mask says so to GCC, whose profile-guided
      // inlining otherwise warns of a write past buf_ (-Wstringop-overflow).
      buf_[held_ & 7U] = c;
      if (++held_ == 8) {
        std::uint64_t w;
        std::memcpy(&w, buf_, 8);
        mix(w);
        held_ = 0;
      }
    }
    void mix(std::uint64_t w) {
      h_ = (h_ ^ w) * 0x9e3779b97f4a7c15ULL;
      h_ ^= h_ >> 32;
    }
    std::uint64_t h_ = slot_hash_seed();
    std::uint64_t length_ = 0;
    char buf_[8];
    std::size_t held_ = 0;
  };
};

/// Whether a slot key is another's, or a record's (SlotHash's partner).
struct SlotEqual {
  using is_transparent = void;
  bool operator()(std::string_view slot, std::string_view other) const { return slot == other; }
  bool operator()(std::string_view slot, const RecordId& id) const {
    return slot.size() == id.scope.size() + 1 + id.key.size() && slot.starts_with(id.scope) &&
           slot[id.scope.size()] == '\n' && slot.ends_with(id.key);
  }
  bool operator()(const RecordId& id, std::string_view slot) const { return (*this)(slot, id); }
};

/// in_flight: claimed, executing (or its holder vanished, once the lease ran out).
/// completed: the response is stored and replayed. released: a retry executes again.
/// indeterminate: the upstream got the request but the outcome is unknown.
enum class RecordState { in_flight, completed, released, indeterminate };
std::string_view to_string(RecordState state);
std::optional<RecordState> parse_state(std::string_view text);

using idemproxy::Header;  // common/header.hpp

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
  /// Trailer fields (RFC 9110 6.5) that followed the body: gRPC's status travels in
  /// them. Replayed as trailers.
  std::vector<Header> trailers{};
  /// A streamed answer kept in chunks (Claims::append): how many, the body's length
  /// and its SHA-256 (32 bytes). `body` is then empty. 0: the body is in `body`.
  std::int32_t chunks = 0;
  std::int64_t body_length = 0;
  std::string body_digest{};
  bool chunked() const { return chunks > 0; }
};

/// One piece of a streamed answer, stored on its own while it streams
/// (Claims::append) and read back in order (Views::read_chunks). Numbered from 1.
struct Chunk {
  std::int32_t seq = 0;
  std::string bytes;
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
  TimePoint completed_at;  // meaningful once completed
  /// The end of its answer's replay window, set when it completed: sooner than
  /// expires_at when a tombstone follows (after_expiry: reject). Unset for records
  /// completed before the store kept it; the route's ttl then decides.
  std::optional<TimePoint> replay_until;
  bool expired = false;                    // judged by the store's clock when the record was read
  TimePoint store_now;                     // the store's clock when the record was read
  bool stale = false;                      // in flight with its lease run out: the holder vanished
  std::optional<StoredResponse> response;  // set when completed
  /// In flight, once its holder's answer has begun to stream (Claims::start_stream):
  /// that answer's status and head fields, which a retry on another instance
  /// attaches to it with. Unset before, and for every other state.
  std::optional<StoredResponse> streaming;
  /// The id of the key that sealed the stored fields (store.encryption); unset when
  /// they are in the clear.
  std::optional<std::string> sealed_with;
};

/// How long a completed record keeps its answer (`answer`, the replay window) and
/// itself (`record`: longer when a tombstone follows, after_expiry: reject). One
/// duration stands for both.
struct Retention {
  template <class Rep, class Period>
  Retention(std::chrono::duration<Rep, Period> both) : answer(both), record(both) {}
  Retention(Duration answer_for, Duration record_for) : answer(answer_for), record(record_for) {}
  Duration answer;
  Duration record;
};

/// A route's caps on one scope's (one tenant's) usage: its stored records, the bytes
/// of their stored answers, and its claims in flight. 0: no cap. A claim of a key the
/// scope has not stored yet is refused past a cap; a key already stored never is.
struct Quota {
  std::int64_t records = 0;
  std::int64_t bytes = 0;
  std::int64_t in_flight = 0;
  bool any() const { return records > 0 || bytes > 0 || in_flight > 0; }
  friend bool operator==(const Quota&, const Quota&) = default;
};

/// What one scope uses of its quota: the records claimed under a quota and not yet
/// deleted, the bytes of their stored answers (headers, trailers and body, as
/// stored), and those in flight.
struct Usage {
  std::int64_t records = 0;
  std::int64_t bytes = 0;
  std::int64_t in_flight = 0;
};

/// Which cap refused a claim.
enum class QuotaCap { records, bytes, in_flight };
std::string_view to_string(QuotaCap cap);
/// The first cap of `quota` that `usage` has reached (records, then bytes, then in
/// flight), or none: a new key may then be claimed.
std::optional<QuotaCap> reached(const Quota& quota, const Usage& usage);

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
  /// The route's `quota`: a new key of a scope at a cap is refused (OverQuota).
  Quota quota{};
};

/// The caller now holds the record under this fencing token.
struct Claimed {
  std::int64_t token = 0;
  TimePoint locked_until;
  bool took_over = false;  // from a holder whose lease ran out (on_stale: retake)
};

/// The key is new to its scope and the scope is at a cap of its quota: nothing was
/// claimed. `usage` is the scope's when the claim was refused.
struct OverQuota {
  QuotaCap cap = QuotaCap::records;
  Usage usage;
  Quota quota;
};

/// Either the caller won the claim, or a live record already exists, or the key is
/// new and its scope is over quota.
using ClaimResult = std::variant<Claimed, Record, OverQuota>;

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

/// Encodes headers as "Name: value\r\n" lines, the form they take on the wire.
/// Encodes a stored answer's fields as one block, laid out as HTTP lays out a message's
/// head and trailer sections: "Name: value\r\n" lines, then, when it has trailers, an
/// empty line and theirs.
std::string encode_headers(const std::vector<Header>& headers,
                           const std::vector<Header>& trailers = {});
/// The head fields of a block; its trailers into `trailers` when given. A block an
/// earlier version wrote names a gRPC answer's trailers in an Idemproxy-Trailers field
/// among the head's: they are moved to `trailers` and the field dropped.
std::vector<Header> decode_headers(std::string_view block, std::vector<Header>* trailers = nullptr);

}  // namespace idemproxy::store
