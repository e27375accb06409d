#include "idemproxy/engine/coordinator.hpp"

#include <algorithm>
#include <optional>

namespace idemproxy::engine {
namespace {

using Kind = Admission::Kind;
using ops::Outcome;

// What enforce mode would have answered, for a request that shadow mode forwards.
Outcome shadow_outcome(Kind kind) {
  switch (kind) {
    case Kind::replay:
      return Outcome::shadow_would_replay;
    case Kind::in_flight:
      return Outcome::shadow_would_conflict;
    case Kind::mismatch:
      return Outcome::shadow_would_mismatch;
    case Kind::store_failed:
      return Outcome::fail_open;
    default:
      return Outcome::shadow_would_reject;
  }
}

}  // namespace

WaitBudget::Deadline WaitBudget::next_backoff(Deadline now) {
  const auto sleep = std::min<std::chrono::steady_clock::duration>(backoff, deadline - now);
  backoff = std::min(backoff * 2, Duration{250});
  return now + sleep;
}

WaitBudget::Deadline WaitBudget::next_fallback(Deadline now) {
  const auto sleep = std::min<std::chrono::steady_clock::duration>(fallback, deadline - now);
  fallback = std::min(fallback * 2, Duration{30000});
  return now + sleep;
}

std::shared_ptr<const ReplayCache::Entry> Coordinator::cached(const RoutePolicy& route,
                                                              const store::RecordId& id) const {
  // Shadow mode never replays: it forwards everything.
  if (route.mode != Mode::enforce) return nullptr;
  return cache_.get(id, hooks_.steady_now());
}

Admission Coordinator::claim(const store::ClaimRequest& claim) {
  holders_.claiming(claim.id);
  std::optional<Admission> verdict;
  try {
    verdict.emplace(engine_.admit(claim));
  } catch (...) {
    holders_.claimed(claim.id, false);  // no verdict: not on its way any more
    throw;
  }
  return admitted(claim, std::move(*verdict));
}

void Coordinator::claim_async(const store::ClaimRequest& claim,
                              std::function<void(Admission)> done) {
  if (!claims_.queues_calls()) {
    hooks_.run_blocking([this, &claim, done = std::move(done)] { done(this->claim(claim)); });
    return;
  }
  holders_.claiming(claim.id);
  try {
    claims_.claim_async(
        claim, [this, &claim, done = std::move(done)](store::Result<store::ClaimResult>&& result) {
          done(admitted(claim, Engine::admission(claim, std::move(result))));
        });
  } catch (...) {
    holders_.claimed(claim.id, false);  // a store throws before it takes a call, not after
    throw;
  }
}

Admission Coordinator::admitted(const store::ClaimRequest& claim, Admission verdict) {
  holders_.claimed(claim.id, verdict.kind == Kind::execute);
  if (verdict.took_over) metrics_.count_takeover();
  if (verdict.kind == Kind::store_failed) metrics_.count_store_error();
  return verdict;
}

Decision Coordinator::refuse(Refusal why, std::string detail, Outcome outcome,
                             std::optional<int> retry_after) {
  Decision d;
  d.kind = Decision::Kind::refuse;
  d.refusal = why;
  d.detail = std::move(detail);
  d.outcome = outcome;
  d.retry_after = retry_after;
  return d;
}

Decision Coordinator::replay_from_store(const store::ClaimRequest& claim, const Admission& verdict,
                                        const ReplayCache::Request& form) {
  ReplayCache::Entry entry{claim.fingerprint, *verdict.replay, verdict.expires_at,
                           hooks_.steady_now() + (verdict.expires_at - verdict.store_now), form};
  entry.token = verdict.token;
  hooks_.prepare_replay(entry);
  auto shared = std::make_shared<const ReplayCache::Entry>(std::move(entry));
  cache_.put(claim.id, shared);
  Decision d;
  d.kind = Decision::Kind::replay;
  d.outcome = Outcome::replayed;
  d.replay = std::move(shared);
  return d;
}

Decision Coordinator::over_quota(const store::OverQuota& q) {
  const auto n = [](std::int64_t v) { return std::to_string(v); };
  switch (q.cap) {
    case store::QuotaCap::in_flight:
      // As for a key in flight: most requests finish within milliseconds.
      return refuse(Refusal::quota_exceeded,
                    "this tenant has " + n(q.usage.in_flight) +
                        " requests in flight, the most its route's quota allows "
                        "(quota.in_flight: " +
                        n(q.quota.in_flight) +
                        "); the request was not forwarded. Retry after Retry-After seconds",
                    Outcome::quota_exceeded, 1);
    case store::QuotaCap::bytes:
      return refuse(
          Refusal::quota_exceeded,
          "this tenant's stored answers take " + n(q.usage.bytes) +
              " bytes, the most its route's quota allows (quota.bytes: " + n(q.quota.bytes) +
              "); a new Idempotency-Key is refused until stored answers expire. "
              "Retries of keys already stored still replay",
          Outcome::quota_exceeded);
    case store::QuotaCap::records:
      break;
  }
  return refuse(Refusal::quota_exceeded,
                "this tenant has " + n(q.usage.records) +
                    " stored records, the most its route's quota allows (quota.records: " +
                    n(q.quota.records) +
                    "); a new Idempotency-Key is refused until records expire. Retries of "
                    "keys already stored still replay",
                Outcome::quota_exceeded);
}

KeyVerdict Coordinator::judge_key(const RoutePolicy& route, KeyState state) {
  using Kind = KeyVerdict::Kind;
  if (state == KeyState::present) return {Kind::claim, ops::Outcome::passthrough};
  if (state == KeyState::absent && !route.key_required) {
    return {Kind::forward, ops::Outcome::passthrough};
  }
  if (route.mode == Mode::shadow) return {Kind::forward, ops::Outcome::shadow_would_reject};
  return {Kind::refuse,
          state == KeyState::absent ? ops::Outcome::missing_key : ops::Outcome::bad_key};
}

Decision Coordinator::decide(const RoutePolicy& route, const store::ClaimRequest& claim,
                             Admission verdict, const WaitBudget& budget,
                             const ReplayCache::Request& form) {
  Decision d;
  if (verdict.kind == Kind::execute) {
    d.kind = Decision::Kind::execute;
    d.token = verdict.token;
    return d;
  }
  if (route.mode == Mode::shadow) {
    d.kind = Decision::Kind::forward_unprotected;
    d.outcome = shadow_outcome(verdict.kind);
    return d;
  }
  switch (verdict.kind) {
    case Kind::execute:
      break;  // answered above
    case Kind::replay:
      return replay_from_store(claim, verdict, form);
    case Kind::mismatch:
      return refuse(Refusal::key_mismatch,
                    "this Idempotency-Key was already used with a different request "
                    "(method, path or body)",
                    Outcome::mismatch);
    case Kind::store_failed:
      if (route.store_unavailable == StoreUnavailable::fail_open) {
        d.kind = Decision::Kind::forward_unprotected;
        d.outcome = Outcome::fail_open;
        d.cause = std::move(verdict.detail);
        return d;
      }
      d = refuse(Refusal::store_unavailable,
                 "the idempotency store is unavailable; the request was not forwarded",
                 Outcome::store_unavailable, 1);
      d.cause = std::move(verdict.detail);
      return d;
    case Kind::not_stored:
      return refuse(
          Refusal::response_not_stored,
          "the request with this Idempotency-Key executed (upstream status " +
              std::to_string(verdict.replay->status) +
              ") but its response was larger than upstream.max_response_size, so it was not "
              "stored and cannot be replayed. Fetch the resource instead of retrying",
          Outcome::not_replayable);
    case Kind::unreadable:
      d = refuse(Refusal::record_unreadable,
                 "a record for this Idempotency-Key exists but cannot be opened; the request "
                 "was not forwarded",
                 Outcome::record_unreadable);
      d.cause = std::move(verdict.detail);
      return d;
    case Kind::stale:
      return refuse(Refusal::outcome_unknown,
                    "the request that claimed this Idempotency-Key stopped without an answer "
                    "(its lease ran out); it may or may not have executed. Check the "
                    "resource, then retry with a new key",
                    Outcome::outcome_unknown);
    case Kind::indeterminate:
      return refuse(Refusal::outcome_indeterminate,
                    "the upstream received the request with this Idempotency-Key but its "
                    "answer was lost (a timeout, a reset or a malformed answer); it may have "
                    "executed. Check the resource, then retry with a new key",
                    Outcome::indeterminate);
    case Kind::expired:
      return refuse(Refusal::expired,
                    "the request with this Idempotency-Key completed at " +
                        rfc3339(verdict.completed_at) + "; its answer was kept until " +
                        rfc3339(verdict.expires_at) +
                        " and has expired, and this route never executes a key twice "
                        "(after_expiry: reject). Use a new key for a new request",
                    Outcome::expired);
    case Kind::over_quota:
      return over_quota(verdict.quota);
    case Kind::in_flight:
      break;
  }
  if (route.on_concurrent == OnConcurrent::wait && hooks_.steady_now() < budget.deadline) {
    d.kind = Decision::Kind::wait;
    d.token = verdict.token;
    d.streaming = std::move(verdict.streaming);
    return d;
  }
  // Retry-After is 1 s, not the end of the lease: the lease only bounds a holder
  // that crashed, and most holders finish within milliseconds.
  return refuse(Refusal::request_in_flight,
                "a request with this Idempotency-Key is still being processed", Outcome::conflict,
                1);
}

Completion Coordinator::complete(const store::ClaimRequest& claim, std::int64_t token,
                                 const RoutePolicy& route, store::StoredResponse answer,
                                 ReplayCache::Request form) {
  // The store starts the TTL when it commits, after this: a replay from memory
  // never outlives the record.
  const Deadline started = hooks_.steady_now();
  return complete_kept(claim, token, route, Engine::keep(std::move(answer), route), std::move(form),
                       started);
}

Completion Coordinator::complete_kept(const store::ClaimRequest& claim, std::int64_t token,
                                      const RoutePolicy& route, KeptAnswer kept,
                                      ReplayCache::Request form, Deadline started) {
  Completion c;
  c.finish = engine_.finish(claim.id, token, kept, &c.expires_at);
  const Deadline valid_until = started + kept.keep.answer;
  return completed(claim, token, route, std::move(form), valid_until, c, std::move(kept));
}

void Coordinator::complete_async(const store::ClaimRequest& claim, std::int64_t token,
                                 const RoutePolicy& route, store::StoredResponse answer,
                                 ReplayCache::Request form, std::function<void(Completion)> done) {
  const Deadline started = hooks_.steady_now();  // as in complete()
  // The call's one block: what its answer needs, and the kept form, made in it, which
  // the store reads until it answers. The store's callback carries only its address,
  // which std::function keeps in place (two pointers), where a callback with all of
  // it took a block of its own beside the kept form's.
  struct Call {
    const store::ClaimRequest& claim;
    std::int64_t token;
    const RoutePolicy& route;
    Deadline started;
    KeptAnswer kept;
    ReplayCache::Request form;
    std::function<void(Completion)> done;
  };
  std::unique_ptr<Call> call(new Call{claim, token, route, started,
                                      Engine::keep(std::move(answer), route), std::move(form),
                                      std::move(done)});
  if (!claims_.queues_calls() || !call->kept.stores) {
    hooks_.run_blocking([this, call = std::shared_ptr<Call>(std::move(call))] {
      call->done(complete_kept(call->claim, call->token, call->route, std::move(call->kept),
                               std::move(call->form), call->started));
    });
    return;
  }
  Call* const raw = call.release();
  try {
    claims_.complete_async(
        claim.id, token, raw->kept.answer, raw->kept.keep,
        [this, raw](const store::Result<TimePoint>& result) {
          const std::unique_ptr<Call> own(raw);
          Completion c;
          c.finish = Engine::finished(result, own->kept.keep, &c.expires_at);
          const Deadline valid_until = own->started + own->kept.keep.answer;
          own->done(completed(own->claim, own->token, own->route, std::move(own->form), valid_until,
                              c, std::move(own->kept)));
        });
  } catch (...) {
    delete raw;  // a store throws before it takes a call, not after
    throw;
  }
}

Completion Coordinator::completed(const store::ClaimRequest& claim, std::int64_t token,
                                  const RoutePolicy& route, ReplayCache::Request form,
                                  Deadline valid_until, Completion c, KeptAnswer kept) {
  if (c.finish == Finish::stored && kept.answer.body_stored) {
    ReplayCache::Entry entry{claim.fingerprint, std::move(kept.answer), c.expires_at, valid_until,
                             std::move(form)};
    hooks_.prepare_replay(entry);
    cache_.put(claim.id, std::move(entry));
  }
  if (c.finish == Finish::store_failed) {
    metrics_.count_store_error();
    c.retrying = hooks_.retry_completion(claim.id, token, route, std::move(kept));
  }
  // Only now, with the answer in the cache: the waiters this wakes replay it from
  // memory instead of asking the store again.
  holders_.release(claim.id);
  return c;
}

Finish Coordinator::abandon(const store::RecordId& id, std::int64_t token, bool sent) {
  // Nothing reached the upstream: a retry may execute. Otherwise the upstream may
  // have acted: never a release.
  const Finish f = sent ? engine_.mark_indeterminate(id, token) : engine_.abandon(id, token);
  if (f == Finish::indeterminate) metrics_.count_marked_indeterminate();
  holders_.release(id);
  return f;
}

Coordinator::Elsewhere Coordinator::wait_elsewhere(const store::RecordId& id,
                                                   const std::shared_ptr<Waiter>& waiter) {
  if (!watches_.announces_finishes()) return Elsewhere::poll;
  holders_.add_remote(id, waiter);
  const auto watched = watches_.watch_record(id);
  if (!watched.ok()) return Elsewhere::poll;  // the next claim reports the store's state
  return watched.value() ? Elsewhere::announced : Elsewhere::finished;
}

}  // namespace idemproxy::engine
