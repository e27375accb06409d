#pragma once
// The idempotency protocol for keyed requests, without a transport. It owns the
// claim, the keys this process holds and who waits for them, the replay cache and
// the order it is filled in, shadow mode, fail-open and completion retries. It
// returns decisions; http/ carries them out on sockets (README: "How a request
// flows").
//
// Threads: claim(), complete() and abandon() call the store and run on the database
// pool; the rest are cheap and run anywhere.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "idemproxy/engine/engine.hpp"
#include "idemproxy/engine/local_holders.hpp"
#include "idemproxy/engine/replay_cache.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/watches.hpp"

namespace idemproxy::engine {

/// Why the proxy answers a keyed request itself. http/problem.hpp maps each to one
/// problem+json response.
enum class Refusal {
  key_mismatch,           // 422
  request_in_flight,      // 409 + Retry-After
  outcome_unknown,        // 409: the holder vanished (on_stale: fail)
  outcome_indeterminate,  // 409: the upstream got it, the answer was lost
  store_unavailable,      // 503 + Retry-After (fail_closed)
  response_not_stored,    // 409: executed, the answer was too large to store
  record_unreadable,      // 500: a sealed record does not open
  expired,                // 409: after_expiry: reject, past ttl; or a UUIDv7 key too old
  quota_exceeded,         // 429: a new key of a tenant at a cap of its route's quota
};

/// What to do with a keyed request after its claim.
struct Decision {
  enum class Kind {
    execute,              // forward under `token`; then complete() or abandon()
    replay,               // send `replay`
    forward_unprotected,  // forward without a claim (fail_open, or shadow mode)
    refuse,               // answer `refusal`
    wait,                 // in flight (on_concurrent: wait): sleep, then claim again
  };
  Kind kind = Kind::refuse;
  ops::Outcome outcome = ops::Outcome::passthrough;  // replay, forward_unprotected, refuse
  std::int64_t token = 0;                            // execute; wait: the holder's
  /// wait: the head of the answer the holder streams, once it does: a retry here
  /// attaches to it from the store when the holder is another instance.
  std::optional<store::StoredResponse> streaming;
  std::shared_ptr<const ReplayCache::Entry> replay;  // replay
  Refusal refusal = Refusal::store_unavailable;      // refuse
  std::string detail;                                // refuse: the problem's detail
  std::optional<int> retry_after;                    // refuse: seconds
  std::string cause;  // the store's own error (store unavailable, record unreadable): for the log
};

/// A request's waiting budget (on_concurrent: wait): until its lease would run out,
/// with a backoff for keys held by other instances.
struct WaitBudget {
  using Deadline = std::chrono::steady_clock::time_point;
  Deadline deadline;
  Duration backoff{5};
  Duration fallback{5000};
  /// The next backoff sleep (doubling to 250 ms), never past the deadline.
  Deadline next_backoff(Deadline now);
  /// The next re-check while the store announces the key's finish: a safety net
  /// only (a listener that reconnects wakes every waiter itself), 5 s doubling to
  /// 30 s, never past the deadline.
  Deadline next_fallback(Deadline now);
};

/// What complete() did with the upstream's answer.
struct Completion {
  Finish finish = Finish::store_failed;
  TimePoint expires_at{};  // stored: the record's expiry (Idempotency-Key-Expires)
  bool retrying = false;   // store_failed: handed to the background retry
};

/// What a covered request's key field (or its key in the body) held.
enum class KeyState {
  present,  // one usable key
  absent,   // none
  invalid,  // unusable: malformed, two key fields, a body value of the wrong kind
};

/// What a covered request does before any claim, decided by its key alone. The one
/// home of the decisions shadow mode and key_required make about keys.
struct KeyVerdict {
  enum class Kind {
    claim,    // go on to the claim
    forward,  // forward without a claim, with `outcome` (passthrough, shadow_would_reject)
    refuse,   // refuse with `outcome` (missing_key, bad_key)
  };
  Kind kind = Kind::claim;
  ops::Outcome outcome = ops::Outcome::passthrough;
};

class Coordinator {
 public:
  /// A key absent from a route that does not require one forwards unprotected; in
  /// shadow mode what enforce would refuse is forwarded and counted; otherwise an
  /// absent key is missing_key and an unusable one bad_key.
  static KeyVerdict judge_key(const RoutePolicy& route, KeyState state);

  using Deadline = std::chrono::steady_clock::time_point;
  /// What the transport provides.
  struct Hooks {
    /// The monotonic clock (a fake one in tests).
    std::function<Deadline()> steady_now = [] { return std::chrono::steady_clock::now(); };
    /// Readies an entry before it is cached (proxy::prepare_replay; its replay is laid
    /// out later, at the first replay).
    std::function<void(ReplayCache::Entry&)> prepare_replay = [](ReplayCache::Entry&) {};
    /// Retries a completion the store did not take, in the background, and calls
    /// completed_later() when it lands; false when the retry budget is spent.
    /// It gets the answer in its kept form (Engine::keep) and finishes it with
    /// finish_later().
    std::function<bool(const store::RecordId&, std::int64_t, const RoutePolicy&, KeptAnswer)>
        retry_completion = [](auto&&...) { return false; };
    /// Runs a blocking store call where blocking is allowed (http/: the database
    /// pool), for a store that does not queue its calls; inline by default.
    std::function<void(std::function<void()>)> run_blocking =
        [](const std::function<void()>& call) { call(); };
  };

  /// The store in its two roles here: `claims` for the request path, `watches` for
  /// requests that wait for another instance.
  Coordinator(store::Claims& claims, store::Watches& watches, ReplayCache& cache,
              ops::Metrics& metrics, Hooks hooks)
      : claims_(claims),
        watches_(watches),
        engine_(claims),
        cache_(cache),
        metrics_(metrics),
        hooks_(std::move(hooks)) {}

  /// A cached answer for `id` on an enforcing route, if any. It replays a retry with
  /// the very same bytes (entry.request.same) or the same fingerprint; anything else
  /// asks the store.
  std::shared_ptr<const ReplayCache::Entry> cached(const RoutePolicy& route,
                                                   const store::RecordId& id) const;

  /// Claims the key (database pool). A key this claims is marked held before it
  /// returns: the losers of one group-commit batch are answered at the same moment
  /// as its winner, and must find the key held here, not poll for it. A claim on its
  /// way counts as held for wait_here() until its verdict is in, so a loser answered
  /// before its winner (another connection's batch) sleeps too.
  Admission claim(const store::ClaimRequest& claim);
  /// claim(), answered through `done`: by the store's own thread when it queues its
  /// calls (queues_store_calls(), no thread waits for it), otherwise by claim() run
  /// through Hooks::run_blocking. The one place that chooses between the two.
  /// `claim` must stay alive until then.
  void claim_async(const store::ClaimRequest& claim, std::function<void(Admission)> done);
  bool queues_store_calls() const { return claims_.queues_calls(); }

  /// What the verdict means on `route`. A replay from the store is cached first,
  /// valid for what the store said was left of its lifetime; `form` is the request
  /// as fingerprinted (see ReplayCache::Request).
  Decision decide(const RoutePolicy& route, const store::ClaimRequest& claim, Admission verdict,
                  const WaitBudget& budget, const ReplayCache::Request& form);

  /// Registers `waiter` when this process holds `id` (Holder::here), or has a claim of
  /// it on its way (Holder::claiming): it is woken on release, or as soon as this
  /// process's claims all lost, the key being held elsewhere (the waiter then waits
  /// for that; it need not claim again). Nothing kept for a key held elsewhere
  /// (wait_elsewhere, or sleep WaitBudget::next_backoff, then ask again).
  Holder wait_here(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter) {
    return holders_.add(id, waiter);
  }

  /// How a request waits for a key that another instance executes.
  enum class Elsewhere {
    announced,  // sleep until the finish is announced (finished_elsewhere), then claim again
    finished,   // it is no longer in flight: claim again at once
    poll,       // the store cannot announce it: re-check on WaitBudget::next_backoff
  };
  /// For a key held by another instance (database pool): registers `waiter`, then
  /// asks the store to announce the key's finish (registering first, so an
  /// announcement that arrives meanwhile is not missed). The caller must call
  /// stop_waiting_elsewhere once it stops waiting.
  Elsewhere wait_elsewhere(const store::RecordId& id, const std::shared_ptr<Waiter>& waiter);
  void stop_waiting_elsewhere(const store::RecordId& id, const Waiter* waiter) {
    holders_.remove_remote(id, waiter);
  }
  /// The store announced that another instance finished `id`: wakes its waiters here.
  void finished_elsewhere(const store::RecordId& id) { holders_.notify_remote(id); }
  /// Announcements may have been lost (the store's listener reconnected): every
  /// request waiting for another instance looks again.
  void announcements_resumed() { holders_.notify_all_remote(); }

  /// Records the upstream's answer under `token` (database pool), in this order:
  /// the store, then the replay cache, then the waiters. Woken waiters find the
  /// answer in memory. An answer too large to store (body_stored false) keeps its
  /// status only and is not cached.
  /// The answer is cut to its kept form in place (Engine::keep): the record, the
  /// replay cache and a retry in the background all take that one form.
  Completion complete(const store::ClaimRequest& claim, std::int64_t token,
                      const RoutePolicy& route, store::StoredResponse answer,
                      ReplayCache::Request form);
  /// complete(), answered through `done`: by the store's own thread when the store
  /// queues its calls and the answer is stored, otherwise as complete() does it, run
  /// through Hooks::run_blocking (an answer not stored releases the claim, a blocking
  /// call). `claim` and `route` must stay alive until then.
  void complete_async(const store::ClaimRequest& claim, std::int64_t token,
                      const RoutePolicy& route, store::StoredResponse answer,
                      ReplayCache::Request form, std::function<void(Completion)> done);

  /// Gives up a claim (database pool). Nothing was `sent`: released, a retry may
  /// execute. Sent without an answer: marked indeterminate, never released.
  Finish abandon(const store::RecordId& id, std::int64_t token, bool sent);

  /// A background completion landed: wakes the key's waiters.
  void completed_later(const store::RecordId& id) { holders_.notify(id); }
  /// The holder here handed its completion to the background retry without trying
  /// it (the store failed under its streamed answer): as a completion that failed.
  void handed_off(const store::RecordId& id) {
    metrics_.count_store_error();
    holders_.release(id);
  }
  /// Its holder here started streaming its answer: the requests waiting for it wake
  /// to attach to the stream.
  void streaming(const store::RecordId& id) { holders_.notify(id); }
  /// A record was purged: its cached answer goes.
  void forget(const store::RecordId& id) { cache_.erase(id); }

  bool renew(const store::RecordId& id, std::int64_t token, Duration lease) {
    return engine_.renew(id, token, lease);
  }
  /// A completion retried in the background (Hooks::retry_completion), in the form
  /// it was kept in.
  Finish finish_later(const store::RecordId& id, std::int64_t token, const KeptAnswer& kept) {
    return engine_.finish(id, token, kept);
  }
  std::size_t waiting_keys() const { return holders_.waiting_keys(); }

 private:
  Decision replay_from_store(const store::ClaimRequest& claim, const Admission& verdict,
                             const ReplayCache::Request& form);
  /// The refusal of a new key over its tenant's quota: 429, Retry-After for in flight.
  static Decision over_quota(const store::OverQuota& q);
  static Decision refuse(Refusal why, std::string detail, ops::Outcome outcome,
                         std::optional<int> retry_after = std::nullopt);
  /// What claim() does with the verdict once the store answered.
  Admission admitted(const store::ClaimRequest& claim, Admission verdict);
  /// What complete() does once the store answered: the replay cache (the answer
  /// replays from memory until `valid_until`, on the monotonic clock), a retry in the
  /// background if the store failed, then the waiters.
  Completion completed(const store::ClaimRequest& claim, std::int64_t token,
                       const RoutePolicy& route, ReplayCache::Request form, Deadline valid_until,
                       Completion c, KeptAnswer kept);
  /// complete() of an answer already kept (Engine::keep), `started` when it began.
  Completion complete_kept(const store::ClaimRequest& claim, std::int64_t token,
                           const RoutePolicy& route, KeptAnswer kept, ReplayCache::Request form,
                           Deadline started);

  store::Claims& claims_;
  store::Watches& watches_;
  Engine engine_;
  ReplayCache& cache_;
  ops::Metrics& metrics_;
  Hooks hooks_;
  LocalHolders holders_;
};

}  // namespace idemproxy::engine
