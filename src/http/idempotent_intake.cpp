// The intake phases of the idempotent path: key -> body -> body key -> cached ->
// fingerprint.
#include "http/headers.hpp"
#include "http/idempotent_phases.hpp"
#include "http/parse_buffered.hpp"
#include "http/relay.hpp"
#include "idemproxy/engine/fingerprint.hpp"
#include "idemproxy/engine/key.hpp"

namespace idemproxy::http::idempotent {

using ops::Outcome;

// Sends a replay: the serialized head when there is one, else built per request.
asio::awaitable<bool> send_replay(RequestContext& ctx, const engine::ReplayCache::Entry& entry) {
  ctx.outcome = Outcome::replayed;
  ctx.original_trace_id = original_trace_id(entry.response);
  bool sent = false;
  if (!entry.head.empty() && ctx.version == 11 && ctx.method != "HEAD") {
    sent = co_await send_cached(ctx, entry);
  } else {
    auto res = replay_response(entry.response, entry.expires_at, ctx.version, ctx.keep_alive);
    if (const auto link = policy_link(ctx); !link.empty()) res.insert(bhttp::field::link, link);
    sent = co_await send_response(ctx, res);
  }
  co_return sent ? ctx.keep_alive : false;
}

// Answers from the replay cache: no database round trip, no commit.
asio::awaitable<Step> replay_cached(Flow& f) {
  f.rt().metrics.count_cache_hit();
  const bool keep = co_await send_replay(f.ctx, *f.hit);
  co_return f.responded(keep);
}

namespace {
// The request's key, and its hash, which names it in logs.
void take_key(Flow& f, std::string key) {
  f.id.key = std::move(key);
  f.ctx.key_hash = engine::sha256_hex(f.id.key).substr(0, 16);
}
}  // namespace

// Phase: key, and the scope it lives in.
asio::awaitable<Step> key_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  if (!f.key_in_body()) {
    auto parsed = engine::parse_key(*f.key_header);
    if (std::holds_alternative<engine::KeyError>(parsed) && f.shadow()) {
      ctx.outcome = Outcome::shadow_would_reject;
      const bool keep = co_await pass_through(ctx);
      co_return f.responded(keep);
    }
    if (const auto* bad = std::get_if<engine::KeyError>(&parsed)) {
      ctx.keep_alive = false;  // the body is left unread
      ctx.fail(ProblemKind::bad_key, bad->reason, Outcome::bad_key);
      co_return Step::failed;
    }
    take_key(f, std::move(std::get<std::string>(parsed)));
  }
  const auto& route = f.route();
  if (route.scope_from == engine::ScopeFrom::authorization) {
    const std::string_view credentials = ctx.head.get()[bhttp::field::authorization];
    if (!credentials.empty()) {
      f.id.scope = "hmac:" + engine::hmac_sha256_hex(ctx.settings->config.scope_key, credentials);
    }
  } else if (route.scope_from == engine::ScopeFrom::client_cert) {
    // The config requires tls.client_ca_file for this, so the handshake already
    // refused every client without a certificate that CA signed.
    f.id.scope = "cert:" + ctx.client.peer_subject;
  } else if (!route.scope_header.empty()) {
    f.id.scope = engine::header_scope(ctx.head.get()[route.scope_header]);
  }
  // A header scope cannot start with "ns:" (header_scope), and a namespace holds no
  // ':', so this spelling is never another record's.
  if (!route.key_namespace.empty()) f.id.scope = "ns:" + route.key_namespace + ":" + f.id.scope;
  co_return Step::next;
}

// Phase: body, bounded by max_body. Beast compares Content-Length with the limit
// only while parsing the header, before the route was known: check it here; the
// parser's own limit still bounds chunked bodies as they arrive.
asio::awaitable<Step> body_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  const auto declared = ctx.head.content_length();
  const bool too_large = declared && *declared > route.max_body;
  if (too_large && f.shadow()) {
    ctx.outcome = Outcome::shadow_would_reject;
    const bool keep = co_await pass_through(ctx);
    co_return f.responded(keep);
  }
  if (!too_large && !co_await continue_if_expected(ctx)) co_return f.responded(false);
  // Trailer fields of a chunked body are never merged into the head that is
  // forwarded and fingerprinted (RFC 9110 6.5). Beast's parser inserts them beside
  // fields of the same name, so the head is kept as it was before the body.
  std::optional<RequestHeader> head_before_trailers;
  if (ctx.head.get().chunked()) head_before_trailers = ctx.head.get().base();
  RequestParser<bhttp::string_body> parser{std::move(ctx.head)};
  parser.body_limit(route.max_body);
  ctx.client.stream.expires_after(ctx.settings->config.server.read_timeout);
  beast::error_code ec = bhttp::error::body_limit;
  if (!too_large) {
    const WideBodyRead room(ctx.client.buffer, parser, true);
    parser.eager(true);  // as async_read has it: a body that arrived whole is parsed whole
    parse_buffered(ctx.client.buffer, parser, ec);
    if (!ec && !parser.is_done()) {
      std::tie(ec, std::ignore) =
          co_await bhttp::async_read(ctx.client.stream, ctx.client.buffer, parser, use_nothrow);
    }
  }
  if (ec == bhttp::error::body_limit) {
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::body_too_large,
             "the request body is larger than max_body (" + std::to_string(route.max_body) +
                 " bytes) for route " + route.name,
             Outcome::too_large);
    co_return Step::failed;
  }
  if (ec) {
    if (ec.category() != bhttp::make_error_code(bhttp::error::bad_method).category()) {
      co_return f.responded(false);  // the client went away or timed out
    }
    ctx.keep_alive = false;
    ctx.fail(ProblemKind::malformed_request, "malformed request body: " + ec.message(),
             Outcome::bad_request);
    co_return Step::failed;
  }
  f.req = parser.release();
  if (head_before_trailers) f.req.base() = std::move(*head_before_trailers);
  co_return Step::next;
}

// Forwards the request as read, without a claim, with `outcome`: for what the body
// or the key's age decided before the fingerprint phase prepares the request.
namespace {
asio::awaitable<Step> forward_as_read(Flow& f, Outcome outcome) {
  RequestContext& ctx = f.ctx;
  prepare_forward(f.req, ctx.client.peer_ip, ctx.client.secure, ctx.settings->config.upstream);
  f.req.prepare_payload();
  f.decision.outcome = outcome;
  co_return co_await forward_unprotected(f);
}
}  // namespace

// Phase: the key from the JSON body, when the request had no key header and the
// route names key_json_pointer (a webhook's event id). The same rules as a header's
// key apply; a body that is not JSON, or a value that is not a usable string or
// integer, is refused with the pointer named. With none there, an optional key
// forwards unprotected, as a request without the header does.
asio::awaitable<Step> body_key_phase(Flow& f) {
  if (!f.key_in_body()) co_return Step::next;
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  auto found = engine::key_from_json(f.req.body(), route.key_json_pointer);
  if (found.found == engine::BodyKey::Found::key) {
    take_key(f, std::move(found.key));
    co_return Step::next;
  }
  const bool absent = found.found == engine::BodyKey::Found::absent;
  if (f.shadow() && (!absent || route.key_required)) {
    co_return co_await forward_as_read(f, Outcome::shadow_would_reject);
  }
  if (absent && !route.key_required) co_return co_await forward_as_read(f, Outcome::passthrough);
  if (absent) {
    ctx.fail(ProblemKind::missing_key,
             "route " + route.name + " requires an " + route.header + " header or a key at " +
                 route.key_json_pointer + " in the JSON body",
             Outcome::missing_key);
  } else {
    ctx.fail(ProblemKind::invalid_key, std::move(found.reason), Outcome::bad_key);
  }
  co_return Step::failed;  // the body was read: the connection stays usable
}

// Phase: max_key_age. A UUIDv7 key says when it was minted (RFC 9562 5.7): one older
// than the route allows is a retry that outlived any record of its first try, so it
// is refused rather than executed again. Other keys are not judged.
asio::awaitable<Step> key_age_phase(Flow& f) {
  const auto& route = f.route();
  if (route.max_key_age.count() == 0) co_return Step::next;
  const auto minted = engine::uuid7_time(f.id.key);
  if (!minted || std::chrono::system_clock::now() - *minted <= route.max_key_age) {
    co_return Step::next;
  }
  RequestContext& ctx = f.ctx;
  if (f.shadow()) co_return co_await forward_as_read(f, Outcome::shadow_would_reject);
  const auto days = std::chrono::duration_cast<std::chrono::hours>(route.max_key_age).count() / 24;
  ctx.fail(ProblemKind::expired,
           "the Idempotency-Key is a UUIDv7 minted at " + rfc3339(*minted) +
               ", longer ago than this route's max_key_age (" +
               (days > 0 ? std::to_string(days) + " days"
                         : std::to_string(route.max_key_age.count() / 1000) + " s") +
               "); a retry that old is not executed. Use a new key for a new request",
           Outcome::expired);
  co_return Step::failed;
}

// Phase: a completed record this process has seen replays from memory, with no
// database round trip and no commit. The very same request bytes replay without a
// fingerprint.
asio::awaitable<Step> cached_phase(Flow& f) {
  f.hit = f.rt().coordinator.cached(f.route(), f.id);
  if (f.hit && f.hit->request.same(f.ctx.method, f.ctx.target, f.req[bhttp::field::content_type],
                                   f.req.body())) {
    co_return co_await replay_cached(f);
  }
  co_return Step::next;
}

// Phase: fingerprint. The same request in other bytes (JSON members reordered, say)
// still replays from memory; anything else (a miss, another fingerprint) goes on to
// the claim.
asio::awaitable<Step> fingerprint_phase(Flow& f) {
  RequestContext& ctx = f.ctx;
  const auto& route = f.route();
  const auto& cfg = ctx.settings->config;
  const std::string_view content_type = f.req[bhttp::field::content_type];
  f.claim.emplace(store::ClaimRequest{std::move(f.id),
                                      engine::fingerprint(ctx.method, ctx.target, content_type,
                                                          f.req.body(), cfg.server.max_json_depth),
                                      route.lease, route.ttl, route.name, ctx.method, ctx.target,
                                      route.on_stale == engine::OnStale::retake,
                                      route.after_expiry_reject});
  if (f.hit && f.hit->fingerprint == f.claim->fingerprint) co_return co_await replay_cached(f);
  f.form = {ctx.method, ctx.target, std::string(content_type), f.req.body()};
  prepare_forward(f.req, ctx.client.peer_ip, ctx.client.secure, cfg.upstream);
  f.req.prepare_payload();
  co_return Step::next;
}

}  // namespace idemproxy::http::idempotent
