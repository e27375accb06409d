// The intake phases of the idempotent path: key -> body -> body key -> key age ->
// cached -> fingerprint.
#include "idemproxy/engine/fingerprint.hpp"
#include "idemproxy/engine/key.hpp"
#include "proxy/forward.hpp"
#include "proxy/phases.hpp"
#include "proxy/replay.hpp"

namespace idemproxy::proxy::idempotent {

using ops::Outcome;

namespace {
// The request's key; its hash, which names it in logs, is made when one reads it
// (RequestContext::key_digest).
void take_key(Flow& f, std::string key) {
  f.id.key = std::move(key);
  f.ctx.key = &f.id.key;
}

// The step after `work`, which answers the client (a replay's outcome is its own).
template <class T>
asio::awaitable<Step> responded_after(asio::awaitable<T> work) {
  co_await std::move(work);
  co_return Step::responded;
}

// The body phase's end, once the body is read or refused.
Step body_read(Flow& f, BodyPiece::Error error) {
  RequestContext& ctx = f.ctx;
  if (error == BodyPiece::Error::too_large) {
    const auto& route = f.route();
    ctx.fail(ProblemKind::body_too_large,
             "the request body is larger than max_body (" + std::to_string(route.max_body) +
                 " bytes) for route " + route.name,
             Outcome::too_large);
    return Step::failed;
  }
  if (error == BodyPiece::Error::malformed) {
    ctx.fail(ProblemKind::malformed_request, "malformed request body", Outcome::bad_request);
    return Step::failed;
  }
  if (error != BodyPiece::Error::none) return Step::responded;  // the client went away
  // The head, the codec's until now, is the request's as it is forwarded.
  f.req.base() = std::move(ctx.ex.head());
  return Step::next;
}

// A shadow route's request with a body over max_body passes through, as enforce
// would refuse it.
asio::awaitable<Step> shadow_passes(Flow& f) {
  f.ctx.outcome = Outcome::shadow_would_reject;
  co_await pass_through(f.ctx);
  co_return Step::responded;
}

// Bounds the body by the route's max_body and takes it when it came whole with the head.
bool take_whole_body(Flow& f) {
  f.ctx.ex.body_limit(f.route().max_body);
  return f.ctx.ex.take_buffered_body(f.req.body());
}

// The body phase where it waits: for the 100-continue (when `continue_first`) to be
// sent, then for a body that did not come with the head.
asio::awaitable<Step> body_awaited(Flow& f, bool continue_first) {
  RequestContext& ctx = f.ctx;
  if (continue_first) {
    if (!co_await ctx.ex.send_continue()) co_return Step::responded;
    if (take_whole_body(f)) co_return body_read(f, BodyPiece::Error::none);
  }
  const auto deadline = std::chrono::steady_clock::now() + ctx.settings.config.server.read_timeout;
  const auto error = co_await ctx.ex.read_whole_body(f.req.body(), deadline);
  co_return body_read(f, error);
}
}  // namespace

// Answers from the replay cache: no database round trip, no commit; and no coroutine
// frame when the client's socket takes the replay at once.
PhaseStep replay_cached(Flow& f) {
  f.rt().metrics.count_cache_hit();
  if (start_replay(f.ctx, *f.hit)) return Step::responded;
  return responded_after(f.ctx.ex.finish_prepared());
}

// Phase: key, and the scope it lives in.
PhaseStep key_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  if (!f.key_in_body()) {
    auto parsed = engine::parse_key(*f.key_header);
    if (const auto* bad = std::get_if<engine::KeyError>(&parsed)) {
      const auto verdict = engine::Coordinator::judge_key(f.route(), engine::KeyState::invalid);
      if (verdict.kind == engine::KeyVerdict::Kind::forward) {
        ctx.outcome = verdict.outcome;
        return responded_after(pass_through(ctx));
      }
      ctx.fail(ProblemKind::bad_key, bad->reason, verdict.outcome);
      return Step::failed;
    }
    take_key(f, std::move(std::get<std::string>(parsed)));
  }
  f.id.scope = record_scope(f.route(), ctx);
  return Step::next;
}

std::string record_scope(const engine::RoutePolicy& route, RequestContext& ctx) {
  std::string scope;
  if (route.scope_from == engine::ScopeFrom::authorization) {
    const std::string_view credentials = ctx.ex.head()[bhttp::field::authorization];
    if (!credentials.empty()) {
      scope = "hmac:" + engine::hmac_sha256_hex(ctx.settings.config.scope_key, credentials);
    }
  } else if (route.scope_from == engine::ScopeFrom::client_cert) {
    // The config requires tls.client_ca_file for this, so the handshake already
    // refused every client without a certificate that CA signed.
    scope = "cert:" + ctx.ex.peer().subject;
  } else if (!route.scope_header.empty()) {
    scope = engine::header_scope(ctx.ex.head()[route.scope_header]);
  }
  // A header scope cannot start with "ns:" (header_scope), and a namespace holds no
  // ':', so this spelling is never another record's.
  if (!route.key_namespace.empty()) scope = "ns:" + route.key_namespace + ":" + scope;
  return scope;
}

// Phase: body, bounded by max_body: a declared length over it is refused before
// the body is read; a body of unknown length, as it arrives.
PhaseStep body_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  const auto declared = ctx.ex.content_length();
  const bool too_large = declared && *declared > route.max_body;
  if (too_large && f.shadow()) return shadow_passes(f);
  if (too_large) return body_read(f, BodyPiece::Error::too_large);
  if (ctx.ex.expects_continue()) return body_awaited(f, true);
  // Most often the body came with the head: no coroutine frame.
  if (take_whole_body(f)) return body_read(f, BodyPiece::Error::none);
  return body_awaited(f, false);
}

// Forwards the request as read, without a claim, with `outcome`: for what the body
// or the key's age decided before the fingerprint phase prepares the request.
namespace {
asio::awaitable<Step> forward_as_read(Flow& f, Outcome outcome) {
  RequestContext& ctx = f.ctx;
  ctx.te_trailers =
      prepare_forward(f.req, ctx.to_upstream, ctx.ex.peer(), ctx.settings.config.upstream);
  frame_whole(f.req);
  f.decision.outcome = outcome;
  return forward_unprotected(f);
}
}  // namespace

// Phase: the key from the JSON body, when the request had no key header and the
// route names key_json_pointer (a webhook's event id). The same rules as a header's
// key apply; a body that is not JSON, or a value that is not a usable string or
// integer, is refused with the pointer named. With none there, an optional key
// forwards unprotected, as a request without the header does.
PhaseStep body_key_phase(Flow& f) {
  if (!f.key_in_body()) return Step::next;
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  auto found = engine::key_from_json(f.req.body(), route.key_json_pointer);
  if (found.found == engine::BodyKey::Found::key) {
    take_key(f, std::move(found.key));
    return Step::next;
  }
  const bool absent = found.found == engine::BodyKey::Found::absent;
  const auto verdict = engine::Coordinator::judge_key(
      route, absent ? engine::KeyState::absent : engine::KeyState::invalid);
  if (verdict.kind == engine::KeyVerdict::Kind::forward) return forward_as_read(f, verdict.outcome);
  refuse_key(ctx, verdict, ProblemKind::invalid_key, std::move(found.reason));
  return Step::failed;  // the body was read: the connection stays usable
}

// Phase: max_key_age. A UUIDv7 key says when it was minted (RFC 9562 5.7): one older
// than the route allows is a retry that outlived any record of its first try, so it
// is refused rather than executed again. Other keys are not judged.
PhaseStep key_age_phase(Flow& f) {
  const auto& route = f.route();
  if (route.max_key_age.count() == 0) return Step::next;
  const auto minted = engine::uuid7_time(f.id.key);
  if (!minted || std::chrono::system_clock::now() - *minted <= route.max_key_age) {
    return Step::next;
  }
  RequestContext& ctx = f.ctx;
  if (f.shadow()) return forward_as_read(f, Outcome::shadow_would_reject);
  const auto days = std::chrono::duration_cast<std::chrono::hours>(route.max_key_age).count() / 24;
  ctx.fail(ProblemKind::expired,
           "the Idempotency-Key is a UUIDv7 minted at " + rfc3339(*minted) +
               ", longer ago than this route's max_key_age (" +
               (days > 0 ? std::to_string(days) + " days"
                         : std::to_string(route.max_key_age.count() / 1000) + " s") +
               "); a retry that old is not executed. Use a new key for a new request",
           Outcome::expired);
  return Step::failed;
}

// Phase: a completed record this process has seen replays from memory, with no
// database round trip and no commit. The very same request bytes replay without a
// fingerprint.
PhaseStep cached_phase(Flow& f) {
  f.hit = f.rt().coordinator.cached(f.route(), f.id);
  // Under a rule that counts header fields the same bytes may be another request.
  if (f.hit && f.route().fingerprint.headers.empty() &&
      f.hit->request.same(f.ctx.method, f.ctx.target, f.ctx.content_type, f.req.body())) {
    return replay_cached(f);
  }
  return Step::next;
}

std::string request_fingerprint(const Flow& f, const engine::FingerprintRule& rule) {
  const RequestContext& ctx = f.ctx;
  engine::RequestParts parts{ctx.method, ctx.target, ctx.content_type, f.req.body(), nullptr};
  if (!rule.headers.empty()) {
    parts.header = [&f](std::string_view name) { return joined_values(f.req, name); };
  }
  return engine::fingerprint(rule, parts, ctx.settings.config.server.max_json_depth);
}

// Phase: fingerprint. The same request in other bytes (JSON members reordered, say)
// still replays from memory; anything else (a miss, another fingerprint) goes on to
// the claim.
PhaseStep fingerprint_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  const auto& cfg = ctx.settings.config;
  f.claim.emplace(store::ClaimRequest{std::move(f.id), request_fingerprint(f, route.fingerprint),
                                      route.lease, route.ttl, route.name, ctx.method, ctx.target,
                                      route.on_stale == engine::OnStale::retake,
                                      route.after_expiry_reject, route.quota});
  ctx.key = &f.claim->id.key;  // moved there with the rest of the id
  if (f.hit && f.hit->fingerprint == f.claim->fingerprint) return replay_cached(f);
  f.form = {ctx.method, ctx.target, std::string(ctx.content_type), f.req.body()};
  ctx.te_trailers = prepare_forward(f.req, ctx.to_upstream, ctx.ex.peer(), cfg.upstream);
  frame_whole(f.req);
  return Step::next;
}

}  // namespace idemproxy::proxy::idempotent
