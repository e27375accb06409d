// The idempotent path as named phases over one context (the shape of Pingora's
// ProxyHttp): key -> body -> body key -> cached -> fingerprint -> claim -> act. Each phase
// returns next, responded or failed; the driver answers every failure with
// problem+json in one place. The protocol's decisions are the coordinator's
// (engine/coordinator.hpp): this file does the I/O they call for.
#include <spdlog/spdlog.h>

#include <array>
#include <utility>

#include "http/fields.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "proxy/forward.hpp"
#include "proxy/permits.hpp"
#include "proxy/phases.hpp"
#include "proxy/replay.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy {
namespace {

using engine::Decision;
using idempotent::Flow;
using idempotent::forward_unprotected;
using idempotent::PhaseStep;
using idempotent::SignalWaiter;
using idempotent::Step;
using idempotent::upstream_timeout;
using ops::Outcome;

// A key another instance executes: the store announces its finish (LISTEN/NOTIFY)
// to the requests that watch it, so they sleep instead of polling. A listener that
// reconnects wakes every such waiter (announcements may have been lost meanwhile);
// a slow re-check (WaitBudget::next_fallback) is the last safety net.
// False when the store cannot announce, and the caller polls instead.
asio::awaitable<bool> wait_elsewhere(Flow& f, const std::shared_ptr<SignalWaiter>& waiter,
                                     engine::WaitBudget& budget) {
  using Elsewhere = engine::Coordinator::Elsewhere;
  Runtime& rt = f.rt();
  const store::RecordId& id = f.claim->id;
  const WaitingElsewhere registered(rt, id, *waiter);  // unregisters on every way out
  const Elsewhere how = co_await rt.blocking(
      [&rt, &id, &waiter] { return rt.coordinator.wait_elsewhere(id, waiter); });
  if (how == Elsewhere::announced) {
    const auto fallback = budget.next_fallback(std::chrono::steady_clock::now());
    co_await waiter->signal.wait_until(fallback);
  }
  co_return how != Elsewhere::poll;
}

// Attaches the request to the stream of its key's holder here, if it is streaming.
// The record that holder holds (its token) is the one the request was judged against
// (f.decision, a wait). False when there is no such stream.
asio::awaitable<bool> attached(Flow& f, const std::shared_ptr<SignalWaiter>& waiter) {
  auto live = f.rt().live.find(f.claim->id, f.decision.token);
  if (!live) co_return false;
  co_await idempotent::attach(f, live, waiter);
  co_return true;
}

// Attaches the request to the stream its key's holder on another instance relays
// (f.decision.streaming), from the store: registered for the record's
// announcements first, so none is missed. False when the store cannot announce: the
// request waits for the finish as before.
asio::awaitable<bool> followed(Flow& f, const std::shared_ptr<SignalWaiter>& waiter) {
  using Elsewhere = engine::Coordinator::Elsewhere;
  Runtime& rt = f.rt();
  const store::RecordId& id = f.claim->id;
  const WaitingElsewhere registered(rt, id, *waiter);  // unregisters on every way out
  waiter->signal.clear();
  const Elsewhere how = co_await rt.blocking(
      [&rt, &id, &waiter] { return rt.coordinator.wait_elsewhere(id, waiter); });
  if (how == Elsewhere::poll) co_return false;
  co_await idempotent::follow(f, *f.decision.streaming, waiter);
  co_return true;
}

// Claims the key and has the coordinator judge the verdict (f.decision). A record
// fingerprinted under another rule (before a reload, or by an instance with another
// config) is judged under its own: a rule change never turns an honest retry into a
// mismatch. A rule it cannot read stays a mismatch.
asio::awaitable<void> claim_and_decide(Flow& f, const engine::WaitBudget& budget) {
  Runtime& rt = f.rt();
  const store::ClaimRequest& claim = *f.claim;
  trace::Span claiming = f.ctx.span.child(trace::kSpanStoreClaim);
  engine::Admission verdict = co_await rt.claim(claim);
  claiming.end();
  std::optional<store::ClaimRequest> under_its_rule;
  if (verdict.other_rule) {
    if (const auto rule = engine::rule_of(verdict.other_rule->fingerprint)) {
      under_its_rule.emplace(claim);
      under_its_rule->fingerprint = idempotent::request_fingerprint(f, *rule);
      verdict = engine::Engine::admission(*under_its_rule,
                                          store::ClaimResult{std::move(*verdict.other_rule)});
    }
  }
  f.decision = rt.coordinator.decide(f.route(), under_its_rule ? *under_its_rule : claim,
                                     std::move(verdict), budget, f.form);
}

// Phase: claim, until the coordinator decides. With on_concurrent: wait, a request
// that finds the key in flight sleeps until its holder, here or on another instance,
// finishes it, up to the lease; one held here whose answer streams is attached to it
// as soon as its head is sent (LiveAnswer), and follows it to its end; one held
// elsewhere whose answer streams follows it from the store (follow).
asio::awaitable<Step> claim_phase(Flow& f) {
  using engine::Holder;
  Runtime& rt = f.rt();
  const store::ClaimRequest& claim = *f.claim;
  engine::WaitBudget budget{std::chrono::steady_clock::now() + f.route().lease};
  std::shared_ptr<SignalWaiter> waiter;
  bool claim_again = true;
  for (bool waited = false;; waited = true) {
    if (waited) {
      // The holder in this process has probably just finished and cached its answer.
      f.hit = rt.coordinator.cached(f.route(), claim.id);
      if (f.hit && f.hit->fingerprint == claim.fingerprint) {
        PhaseStep replayed = idempotent::replay_cached(f);
        if (const Step* now = std::get_if<Step>(&replayed)) co_return *now;
        co_return co_await std::move(std::get<asio::awaitable<Step>>(replayed));
      }
      if (co_await attached(f, waiter)) co_return Step::responded;
    }
    // Past the deadline, always the claim: the coordinator's decision ends the wait.
    if (std::exchange(claim_again, true) || std::chrono::steady_clock::now() >= budget.deadline) {
      co_await claim_and_decide(f, budget);
      if (f.decision.kind != Decision::Kind::wait) co_return Step::next;
    }
    if (!waiter) {
      const auto ex = co_await asio::this_coro::executor;
      waiter = std::make_shared<SignalWaiter>(ex);
    }
    waiter->signal.clear();
    Holder holder = rt.coordinator.wait_here(claim.id, waiter);
    if (holder == Holder::elsewhere) {
      if (f.decision.streaming && co_await followed(f, waiter)) co_return Step::responded;
      if (co_await wait_elsewhere(f, waiter, budget)) continue;
      // The store cannot announce finishes: ask again after a backoff, unless a
      // request of this process claimed the key meanwhile: look once more first.
      const auto backoff = budget.next_backoff(std::chrono::steady_clock::now());
      co_await waiter->signal.wait_until(backoff);
      waiter->signal.clear();
      holder = rt.coordinator.wait_here(claim.id, waiter);
      if (holder == Holder::elsewhere) continue;
    }
    // Held by this process: sleep until it releases the key, or its answer starts
    // streaming; no database polling. Claimed by this process, its verdict not yet
    // in (answered on another connection after this one): sleep until it wins, as
    // held, or all of this process's claims lose. Woken then with nothing cached, the
    // verdict in hand still stands (the key was in flight): this request looks where
    // it is held now instead of claiming again, so the woken do not claim together
    // and make each other sleep on their claims once more.
    claim_again = holder == Holder::here;
    if (co_await attached(f, waiter)) co_return Step::responded;
    co_await waiter->signal.wait_until(budget.deadline);
  }
}

// Phase: act on the coordinator's decision.
asio::awaitable<Step> act_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  Decision& d = f.decision;
  switch (d.kind) {
    case Decision::Kind::execute:
      co_return co_await idempotent::execute(f);
    case Decision::Kind::replay:
      if (d.replay->response.chunked()) {
        co_await idempotent::replay_chunks(f, *d.replay);
        co_return Step::responded;
      }
      co_await send_replay(ctx, *d.replay);
      co_return Step::responded;
    case Decision::Kind::forward_unprotected:
      if (!d.cause.empty())
        ctx.log(spdlog::level::warn, "idempotency store unavailable: {}", d.cause);
      if (d.outcome == Outcome::fail_open && !f.shadow()) {
        ctx.log(spdlog::level::warn,
                "route {}: forwarding key {} WITHOUT idempotency protection (fail_open)",
                f.route().name, ctx.key_digest());
      }
      co_return co_await forward_unprotected(f);
    case Decision::Kind::refuse:
      if (d.refusal == engine::Refusal::store_unavailable) {
        ctx.log(spdlog::level::warn, "idempotency store unavailable: {}", d.cause);
      } else if (d.refusal == engine::Refusal::record_unreadable) {
        ctx.log(spdlog::level::err, "key {}: {}", ctx.key_digest(), d.cause);
      }
      ctx.fail(refusal_error(d.refusal, std::move(d.detail), d.retry_after), d.outcome);
      co_return Step::failed;
    case Decision::Kind::wait:
      break;  // claim_phase waits; it never hands a wait on
  }
  co_return Step::failed;
}

struct Phase {
  const char* name;
  PhaseStep (*run)(Flow&);
};

// A phase that is a coroutine throughout: the driver awaits all of it.
template <asio::awaitable<Step> (*Coroutine)(Flow&)>
PhaseStep awaited(Flow& f) {
  return Coroutine(f);
}

constexpr std::array<Phase, 8> kPhases{{
    {"key", idempotent::key_phase},
    {"body", idempotent::body_phase},
    {"body key", idempotent::body_key_phase},
    {"key age", idempotent::key_age_phase},
    {"cached", idempotent::cached_phase},
    {"fingerprint", idempotent::fingerprint_phase},
    {"claim", awaited<claim_phase>},
    {"act", awaited<act_phase>},
}};

}  // namespace

namespace idempotent {

// Forwards without a claim: the store is down and the route says fail_open, the
// route is in shadow mode and enforce would not have forwarded, or an optional key
// is absent from the body.
asio::awaitable<Step> forward_unprotected(Flow& f) {
  RequestContext& ctx = f.ctx;
  const Duration timeout = upstream_timeout(ctx, f.req);
  trace::Span up = start_upstream_span(ctx, f.req.base());
  UpstreamAnswer ex =
      co_await round_trip(ctx.rt.upstream, f.req, ctx.to_upstream, ctx.te_trailers, &ctx.ex,
                          timeout, ctx.settings.config.upstream.max_response_size);
  if (ex.error) {
    up.set_error("upstream failed");
    ctx.fail(*ex.error, Outcome::upstream_error);
    co_return Step::failed;
  }
  up.set_http_status(static_cast<int>(ex.oversized ? ex.oversized->call->head().result_int()
                                                   : ex.response.result_int()));
  up.end();
  ctx.outcome = f.decision.outcome;
  if (ex.oversized) {
    co_await stream_response(ctx, *ex.oversized->call, ex.oversized->prefix);
  } else {
    ctx.upstream_status = ex.response.result_int();
    strip_hop_by_hop(ex.response);
    co_await respond(ctx, ex);
  }
  co_return Step::responded;
}

asio::awaitable<bool> respond(RequestContext& ctx, UpstreamAnswer& answer) {
  const std::string_view body = answer.response.body();
  const Trailers trailers = answer.trailers;
  const bool sent = co_await send_answer(ctx, answer.response.base(), body, trailers);
  co_return sent;
}

Duration upstream_timeout(const RequestContext& ctx, const RequestHeader& head) {
  const auto timeout = ctx.settings.config.upstream.timeout;
  if (!ctx.grpc) return timeout;
  const auto deadline = engine::parse_grpc_timeout(head["grpc-timeout"]);
  return deadline ? std::min(timeout, *deadline) : timeout;
}

}  // namespace idempotent

namespace {

// A phase failed: the problem it named answers the request, or an internal error when
// it named none.
asio::awaitable<void> answer_failure(RequestContext& ctx, const char* phase) {
  if (!ctx.error) {
    ctx.log(spdlog::level::err, "phase {} failed without saying why", phase);
    ctx.fail(ProblemKind::internal, "internal error", Outcome::bad_request);
  }
  co_await send_problem(ctx);
}

// The phases from kPhases[at], whose work `pending` is, to the end.
asio::awaitable<void> finish_phases(Flow& flow, std::size_t at, asio::awaitable<Step> pending) {
  Step step = co_await std::move(pending);
  for (;;) {
    if (step == Step::responded) co_return;
    if (step == Step::failed) {
      co_await answer_failure(flow.ctx, kPhases[at].name);
      co_return;
    }
    if (++at == kPhases.size()) co_return;
    PhaseStep now = kPhases[at].run(flow);
    if (const Step* decided = std::get_if<Step>(&now)) {
      step = *decided;
    } else {
      asio::awaitable<Step> rest = std::move(std::get<asio::awaitable<Step>>(now));
      step = co_await std::move(rest);
    }
  }
}

}  // namespace

namespace idempotent {

Answering run(Flow& flow) {
  for (std::size_t at = 0; at < kPhases.size(); ++at) {
    PhaseStep now = kPhases[at].run(flow);
    const Step* decided = std::get_if<Step>(&now);
    if (decided == nullptr) {
      return finish_phases(flow, at, std::move(std::get<asio::awaitable<Step>>(now)));
    }
    if (*decided == Step::responded) return std::nullopt;
    if (*decided == Step::failed) return answer_failure(flow.ctx, kPhases[at].name);
  }
  return std::nullopt;
}

}  // namespace idempotent

}  // namespace idemproxy::proxy
