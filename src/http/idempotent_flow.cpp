// The idempotent path, phase by phase:
//   key -> body -> fingerprint -> claim -> (replay | reject | wait | forward) -> record -> respond
#include <spdlog/spdlog.h>

#include <algorithm>

#include "http/headers.hpp"
#include "http/relay.hpp"
#include "http/request_context.hpp"
#include "idemproxy/engine/fingerprint.hpp"
#include "idemproxy/engine/key.hpp"

namespace idemproxy::http {
namespace {

using engine::Admission;
using ops::Outcome;

std::string wait_id(const store::RecordId& id) { return id.scope + '\n' + id.key; }

// What the fingerprint was computed from (see ReplayCache::Request).
engine::ReplayCache::Request request_form(const RequestContext& ctx, const StringRequest& req) {
  return {ctx.method, ctx.target, std::string(req[bhttp::field::content_type]), req.body()};
}

// What enforce mode would have answered, for a request that shadow mode forwards.
Outcome shadow_outcome(Admission::Kind kind) {
  switch (kind) {
    case Admission::Kind::replay:
      return Outcome::shadow_would_replay;
    case Admission::Kind::in_flight:
      return Outcome::shadow_would_conflict;
    case Admission::Kind::mismatch:
      return Outcome::shadow_would_mismatch;
    case Admission::Kind::store_failed:
      return Outcome::fail_open;
    default:
      return Outcome::shadow_would_reject;
  }
}

// Interim answers (103 Early Hints, 102) go to the client as they arrive; the final
// one is what is stored.
InterimSink interim_sink(RequestContext& ctx) {
  return {&ctx.client.stream, ctx.version, ctx.settings->config.server.read_timeout};
}

// Sends an upstream answer to the client as a whole message.
asio::awaitable<bool> respond(RequestContext& ctx, StringResponse& res) {
  res.version(ctx.version);
  res.prepare_payload();
  co_return co_await send_response(ctx, res) && ctx.keep_alive;
}

// Phase: forward without a claim: the store is down and the route says fail_open, or
// the route is in shadow mode and enforce would not have forwarded.
asio::awaitable<bool> forward_unprotected(RequestContext& ctx, StringRequest& req,
                                          Outcome outcome) {
  Exchange ex = co_await ctx.rt.upstream.exchange(req, interim_sink(ctx));
  if (ex.error) {
    ctx.fail(*ex.error, Outcome::upstream_error);
    co_return co_await send_problem(ctx);
  }
  ctx.outcome = outcome;
  if (ex.oversized) {
    co_return co_await stream_response(ctx, ex.oversized->conn, *ex.oversized->parser,
                                       ex.oversized->prefix);
  }
  ctx.upstream_status = ex.response.result_int();
  strip_hop_by_hop(ex.response);
  co_return co_await respond(ctx, ex.response);
}

// Phases forward -> record -> respond, while holding the claim under `token`. The
// caller has marked the key held in rt.waiters; this releases it.
asio::awaitable<bool> execute(RequestContext& ctx, const store::ClaimRequest& claim,
                              std::int64_t token, StringRequest& req) {
  auto& rt = ctx.rt;
  const store::RecordId& id = claim.id;
  const auto& route = *ctx.route;
  rt.metrics.claim_started();
  const auto t0 = std::chrono::steady_clock::now();
  // The lease is renewed while the upstream works (LeaseRenewals).
  auto heartbeat = std::make_optional<LeaseRenewals::Hold>(rt.leases, id, token, route.lease);
  Exchange ex = co_await rt.upstream.exchange(req, interim_sink(ctx));
  heartbeat.reset();
  const double upstream_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rt.metrics.observe_upstream(upstream_seconds);
  ctx.upstream_ms = upstream_seconds * 1000;
  if (ex.error) {
    if (!ex.sent) {
      // Nothing reached the upstream: a retry may execute.
      co_await rt.blocking([&rt, &id, &token] { return rt.engine.abandon(id, token); });
    } else {
      // The upstream may have acted: never a release. Retries are told the outcome
      // is unknown (on_stale: fail) or execute again after the lease (retake).
      const auto marked = co_await rt.blocking(
          [&rt, &id, &token] { return rt.engine.mark_indeterminate(id, token); });
      spdlog::warn(
          "key {}: the upstream failed after the request was sent; record {}", ctx.key_hash,
          marked == engine::Finish::indeterminate ? "marked indeterminate"
                                                  : "left to its lease (store unreachable)");
    }
    rt.metrics.claim_ended();
    rt.waiters.release(wait_id(id));
    ctx.fail(*ex.error, Outcome::upstream_error);
    co_return co_await send_problem(ctx);
  }

  // Never truncated: an answer over upstream.max_response_size is streamed to this
  // client whole, and its record keeps only the status, so retries are told it
  // executed instead of being handed part of a body.
  auto* big = ex.oversized ? &*ex.oversized : nullptr;
  bhttp::response_header<>& head = big ? big->parser->get().base() : ex.response.base();
  ctx.upstream_status = head.result_int();
  store::StoredResponse answer;
  if (big) {
    answer = {static_cast<int>(head.result_int()), {}, {}, false};
  } else {
    strip_hop_by_hop(ex.response);
    answer = {static_cast<int>(ex.response.result_int()), to_headers(ex.response),
              ex.response.body()};
  }
  TimePoint expires_at{};
  store::StoredResponse stored;  // as kept in the record: what replays send
  // The store starts the TTL when it commits, after this: a replay from memory
  // never outlives the record.
  const auto finish_started = std::chrono::steady_clock::now();
  const engine::Finish finish =
      co_await rt.blocking([&rt, &route, &answer, &id, &token, &expires_at, &stored] {
        return rt.engine.finish(id, token, route, answer, &expires_at, &stored);
      });
  rt.metrics.claim_ended();
  switch (finish) {
    case engine::Finish::stored:
      ctx.outcome = big ? Outcome::executed_not_stored : Outcome::executed;
      head.set(kExpiresHeader, http_date(expires_at));
      // The stored form: a replay from memory sends what one from the record would.
      // (An answer too large to store is not kept: its body_stored is false.)
      rt.cache.put(id, cache_entry(claim.fingerprint, std::move(stored), expires_at,
                                   finish_started + route.ttl, request_form(ctx, req)));
      break;
    case engine::Finish::released:
      ctx.outcome = Outcome::released;
      break;
    case engine::Finish::indeterminate:
    case engine::Finish::fenced:
      ctx.outcome = Outcome::executed;
      spdlog::warn("key {}: the claim was taken over before completion; response not stored",
                   ctx.key_hash);
      break;
    case engine::Finish::store_failed:
      ctx.outcome = Outcome::executed;
      rt.metrics.count_store_error();
      if (rt.completions.retry(id, token, route, answer)) {
        spdlog::warn("key {}: the response could not be stored yet; retrying in the background",
                     ctx.key_hash);
      } else {
        spdlog::error(
            "key {}: the response could not be stored and the retry budget is spent; "
            "the record stays in flight",
            ctx.key_hash);
      }
      break;
  }
  // After the answer is in the cache: the waiters this wakes replay it from there.
  rt.waiters.release(wait_id(id));
  if (big) {
    spdlog::warn(
        "key {}: the response exceeds upstream.max_response_size; streamed whole, "
        "and retries will not replay it",
        ctx.key_hash);
    co_return co_await stream_response(ctx, big->conn, *big->parser, big->prefix);
  }
  co_return co_await respond(ctx, ex.response);
}

// Answers from the replay cache: no database round trip, no commit.
asio::awaitable<bool> replay_cached(RequestContext& ctx, const engine::ReplayCache::Entry& hit) {
  ctx.outcome = Outcome::replayed;
  ctx.rt.metrics.count_cache_hit();
  if (!hit.head.empty() && ctx.version == 11 && ctx.method != "HEAD") {
    co_return co_await send_cached(ctx, hit) && ctx.keep_alive;
  }
  auto res = replay_response(hit.response, hit.expires_at, ctx.version, ctx.keep_alive);
  co_return co_await send_response(ctx, res) && ctx.keep_alive;
}

// Phase: claim, then act on the engine's verdict. With on_concurrent: wait, a
// request that finds the key in flight sleeps until the holder in this process
// finishes (or a backoff re-check for holders elsewhere), up to the lease.
asio::awaitable<bool> claim_and_act(RequestContext& ctx, const store::ClaimRequest& claim,
                                    StringRequest& req) {
  auto& rt = ctx.rt;
  const auto& route = *ctx.route;
  const auto deadline = std::chrono::steady_clock::now() + route.lease;
  Duration backoff{5};
  for (bool waited = false;; waited = true) {
    if (waited && route.mode == engine::Mode::enforce) {
      // The holder in this process has probably just finished and cached its answer.
      const auto hit = rt.cache.get(claim.id, std::chrono::steady_clock::now());
      if (hit && hit->fingerprint == claim.fingerprint) co_return co_await replay_cached(ctx, *hit);
    }
    Admission a = co_await rt.blocking([&rt, &claim] {
      Admission verdict = rt.engine.admit(claim);
      // Marked held here, on the database thread, before this request resumes: the
      // losers of one group-commit batch are answered at the same moment as its
      // winner, and must find the key held by this process, not poll for it.
      if (verdict.kind == Admission::Kind::execute) rt.waiters.hold(wait_id(claim.id));
      return verdict;
    });
    if (a.took_over) rt.metrics.count_takeover();
    if (route.mode == engine::Mode::shadow && a.kind != Admission::Kind::execute) {
      if (a.kind == Admission::Kind::store_failed) rt.metrics.count_store_error();
      co_return co_await forward_unprotected(ctx, req, shadow_outcome(a.kind));
    }
    switch (a.kind) {
      case Admission::Kind::execute:
        co_return co_await execute(ctx, claim, a.token, req);
      case Admission::Kind::replay: {
        ctx.outcome = Outcome::replayed;
        // Valid here for what the store said was left of its lifetime.
        rt.cache.put(claim.id,
                     cache_entry(claim.fingerprint, *a.replay, a.expires_at,
                                 std::chrono::steady_clock::now() + (a.expires_at - a.store_now),
                                 request_form(ctx, req)));
        auto res = replay_response(*a.replay, a.expires_at, ctx.version, ctx.keep_alive);
        co_return co_await send_response(ctx, res) && ctx.keep_alive;
      }
      case Admission::Kind::mismatch:
        ctx.fail(ErrorSource::downstream, ProblemKind::key_mismatch,
                 "this Idempotency-Key was already used with a different request "
                 "(method, path or body)",
                 Outcome::mismatch);
        co_return co_await send_problem(ctx);
      case Admission::Kind::store_failed:
        rt.metrics.count_store_error();
        spdlog::warn("idempotency store unavailable: {}", a.detail);
        if (route.store_unavailable == engine::StoreUnavailable::fail_open) {
          spdlog::warn("route {}: forwarding key {} WITHOUT idempotency protection (fail_open)",
                       route.name, ctx.key_hash);
          co_return co_await forward_unprotected(ctx, req, Outcome::fail_open);
        }
        ctx.fail(ErrorSource::store, ProblemKind::store_unavailable,
                 "the idempotency store is unavailable; the request was not forwarded",
                 Outcome::store_unavailable, 1);
        co_return co_await send_problem(ctx);
      case Admission::Kind::not_stored:
        ctx.fail(ErrorSource::downstream, ProblemKind::response_not_stored,
                 "the request with this Idempotency-Key executed (upstream status " +
                     std::to_string(a.replay->status) +
                     ") but its response was larger than upstream.max_response_size, so it was "
                     "not stored and cannot be replayed. Fetch the resource instead of retrying",
                 Outcome::not_replayable);
        co_return co_await send_problem(ctx);
      case Admission::Kind::unreadable:
        spdlog::error("key {}: {}", ctx.key_hash, a.detail);
        ctx.fail(ErrorSource::store, ProblemKind::record_unreadable,
                 "a record for this Idempotency-Key exists but cannot be opened; the request "
                 "was not forwarded",
                 Outcome::record_unreadable);
        co_return co_await send_problem(ctx);
      case Admission::Kind::stale:
        ctx.fail(ErrorSource::downstream, ProblemKind::outcome_unknown,
                 "the request that claimed this Idempotency-Key stopped without an answer "
                 "(its lease ran out); it may or may not have executed. Check the resource, "
                 "then retry with a new key",
                 Outcome::outcome_unknown);
        co_return co_await send_problem(ctx);
      case Admission::Kind::indeterminate:
        ctx.fail(ErrorSource::downstream, ProblemKind::outcome_indeterminate,
                 "the upstream received the request with this Idempotency-Key but its answer "
                 "was lost (timeout or reset); it may have executed. Check the resource, then "
                 "retry with a new key",
                 Outcome::indeterminate);
        co_return co_await send_problem(ctx);
      case Admission::Kind::in_flight:
        break;
    }
    const auto now = std::chrono::steady_clock::now();
    if (route.on_concurrent == engine::OnConcurrent::reject || now >= deadline) {
      // Retry-After is 1 s, not the end of the lease: the lease only bounds a holder
      // that crashed, and most holders finish within milliseconds.
      ctx.fail(ErrorSource::downstream, ProblemKind::request_in_flight,
               "a request with this Idempotency-Key is still being processed", Outcome::conflict,
               1);
      co_return co_await send_problem(ctx);
    }
    auto timer = std::make_shared<asio::steady_timer>(co_await asio::this_coro::executor);
    timer->expires_after(std::min<std::chrono::steady_clock::duration>(backoff, deadline - now));
    if (!rt.waiters.add(wait_id(claim.id), timer)) {
      backoff = std::min(backoff * 2, Duration{250});  // held elsewhere: re-check later
      co_await timer->async_wait(use_nothrow);
      // Answered in the same group-commit batch as a holder in this process, this
      // request may have looked before that holder marked the key. Look once more
      // before asking the store again.
      if (!rt.waiters.add(wait_id(claim.id), timer)) continue;
    }
    // Held by this process: sleep until it releases the key; no database polling.
    timer->expires_at(deadline);
    co_await timer->async_wait(use_nothrow);
  }
}

}  // namespace

asio::awaitable<bool> run_idempotent(RequestContext& ctx, std::string_view key_header) {
  const auto& route = *ctx.route;
  const auto& cfg = ctx.settings->config;

  // Phase: key.
  auto parsed = engine::parse_key(key_header);
  const bool shadow = route.mode == engine::Mode::shadow;
  if (std::holds_alternative<engine::KeyError>(parsed) && shadow) {
    ctx.outcome = Outcome::shadow_would_reject;
    co_return co_await pass_through(ctx);
  }
  if (const auto* bad = std::get_if<engine::KeyError>(&parsed)) {
    ctx.keep_alive = false;  // the body is left unread
    ctx.fail(ErrorSource::downstream, ProblemKind::bad_key, bad->reason, Outcome::bad_key);
    co_return co_await send_problem(ctx);
  }
  const std::string key = std::move(std::get<std::string>(parsed));
  ctx.key_hash = engine::sha256_hex(key).substr(0, 16);
  std::string scope;
  if (route.scope_from == engine::ScopeFrom::authorization) {
    const std::string_view credentials = ctx.head.get()[bhttp::field::authorization];
    if (!credentials.empty()) {
      scope = "hmac:" + engine::hmac_sha256_hex(cfg.scope_key, credentials);
    }
  } else if (route.scope_from == engine::ScopeFrom::client_cert) {
    // The config requires tls.client_ca_file for this, so the handshake already
    // refused every client without a certificate that CA signed.
    scope = "cert:" + ctx.client.peer_subject;
  } else if (!route.scope_header.empty()) {
    scope = engine::header_scope(ctx.head.get()[route.scope_header]);
  }

  // Phase: body, bounded by max_body. Beast compares Content-Length with the limit
  // only while parsing the header, before the route was known: check it here; the
  // parser's own limit still bounds chunked bodies as they arrive.
  const auto declared = ctx.head.content_length();
  const bool too_large = declared && *declared > route.max_body;
  if (too_large && shadow) {
    ctx.outcome = Outcome::shadow_would_reject;
    co_return co_await pass_through(ctx);
  }
  if (!too_large && !co_await continue_if_expected(ctx)) co_return false;
  // Trailer fields of a chunked body are never merged into the head that is
  // forwarded and fingerprinted (RFC 9110 6.5). Beast's parser inserts them beside
  // fields of the same name, so the head is kept as it was before the body.
  std::optional<bhttp::request_header<>> head_before_trailers;
  if (ctx.head.get().chunked()) head_before_trailers = ctx.head.get().base();
  bhttp::request_parser<bhttp::string_body> parser{std::move(ctx.head)};
  parser.body_limit(route.max_body);
  ctx.client.stream.expires_after(cfg.server.read_timeout);
  beast::error_code ec = bhttp::error::body_limit;
  if (!too_large) {
    const WideBodyRead room(ctx.client.buffer, parser, true);
    std::tie(ec, std::ignore) =
        co_await bhttp::async_read(ctx.client.stream, ctx.client.buffer, parser, use_nothrow);
  }
  if (ec == bhttp::error::body_limit) {
    ctx.keep_alive = false;
    ctx.fail(ErrorSource::downstream, ProblemKind::body_too_large,
             "the request body is larger than max_body (" + std::to_string(route.max_body) +
                 " bytes) for route " + route.name,
             Outcome::too_large);
    co_return co_await send_problem(ctx);
  }
  if (ec) {
    if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
      co_return false;  // the client went away or timed out
    }
    ctx.keep_alive = false;
    ctx.fail(ErrorSource::downstream, ProblemKind::malformed_request,
             "malformed request body: " + ec.message(), Outcome::bad_request);
    co_return co_await send_problem(ctx);
  }
  StringRequest req = parser.release();
  if (head_before_trailers) req.base() = std::move(*head_before_trailers);

  // A completed record this process has seen replays from memory: no database round
  // trip, no commit. The very same request bytes replay without a fingerprint.
  store::RecordId id{std::move(scope), key};
  const std::string_view content_type = req[bhttp::field::content_type];
  std::shared_ptr<const engine::ReplayCache::Entry> hit;
  if (route.mode == engine::Mode::enforce) {
    hit = ctx.rt.cache.get(id, std::chrono::steady_clock::now());
    if (hit && hit->request.same(ctx.method, ctx.target, content_type, req.body())) {
      co_return co_await replay_cached(ctx, *hit);
    }
  }

  // Phase: fingerprint, then claim.
  const store::ClaimRequest claim{std::move(id),
                                  engine::fingerprint(ctx.method, ctx.target, content_type,
                                                      req.body(), cfg.server.max_json_depth),
                                  route.lease,
                                  route.ttl,
                                  route.name,
                                  ctx.method,
                                  ctx.target,
                                  route.on_stale == engine::OnStale::retake};
  // The same request in other bytes (JSON members reordered, say) still replays from
  // memory; anything else (a miss, another fingerprint) asks the store.
  if (hit && hit->fingerprint == claim.fingerprint) co_return co_await replay_cached(ctx, *hit);
  prepare_forward(req, ctx.client.peer_ip, ctx.client.stream.tls() != nullptr, cfg.upstream);
  req.prepare_payload();
  co_return co_await claim_and_act(ctx, claim, req);
}

}  // namespace idemproxy::http
