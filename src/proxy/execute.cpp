// The execute phase: forwards under the claim, relays the answer, has the coordinator
// record it. An answer that ends with its first piece (most API answers) is recorded
// before it is sent, as it always was; any other (a stream of events, an export, a
// gRPC server stream, a body over max_response_size) reaches the client piece by
// piece as the upstream sends it, and is stored as it flows (whole in the record's row
// while small, in chunks under the claim past that: stream_store.hpp) and recorded
// once it has ended. upstream.timeout bounds the wait for the head,
// upstream.read_timeout each wait between pieces, upstream.stream_timeout (when set)
// the whole body; the lease is renewed until the answer is recorded.
#include <spdlog/spdlog.h>

#include "idemproxy/engine/grpc_status.hpp"
#include "proxy/forward.hpp"
#include "proxy/permits.hpp"
#include "proxy/phases.hpp"
#include "proxy/spans.hpp"
#include "proxy/stream_store.hpp"

namespace idemproxy::proxy::idempotent {
namespace {

using ops::Outcome;
using Clock = std::chrono::steady_clock;

// What the record keeps of a streamed answer it could not keep (over the route's
// max_stored_answer, or an append the store failed): its
// status, and its opt-out, which still counts (retries are told it executed, never
// handed part of a body).
store::StoredResponse status_only(const ResponseHeader& head, std::string_view policy) {
  store::StoredResponse answer{static_cast<int>(head.result_int()), {}, {}, false};
  if (!policy.empty())
    answer.headers.push_back({std::string(engine::kPolicyField), std::string(policy)});
  return answer;
}

// The head of an answer that is (or will be) stored says until when its key is
// honoured, and where the published policy is.
void announce_record(const RequestContext& ctx, ResponseHeader& head, TimePoint expires_at) {
  head.set(kExpiresHeader, http_date(expires_at));
  if (const auto link = policy_link(ctx); !link.empty()) head.insert(bhttp::field::link, link);
}

// The answer's Idempotency-Policy, every field of it joined as one list. A directive
// the proxy cannot read is logged and ignored.
std::string policy_field(RequestContext& ctx, const ResponseHeader& head) {
  std::string policy = joined_values(head, engine::kPolicyField);
  if (policy.empty()) return policy;
  if (const auto read = engine::read_answer_policy(policy); !read.malformed.empty()) {
    ctx.log(spdlog::level::warn,
            "the upstream's {} has a directive the proxy cannot read, ignored: \"{}\" "
            "(it knows no-store and max-age=N, N seconds)",
            engine::kPolicyField, read.malformed);
  }
  return policy;
}

// Logs what recording the answer came to, and sets the request's outcome.
void note_completion(RequestContext& ctx, const engine::Completion& done, bool whole) {
  switch (done.finish) {
    case engine::Finish::stored:
      ctx.outcome = whole ? Outcome::executed : Outcome::executed_not_stored;
      break;
    case engine::Finish::released:
      ctx.outcome = Outcome::released;
      break;
    case engine::Finish::indeterminate:
    case engine::Finish::fenced:
      ctx.outcome = Outcome::executed;
      ctx.log(spdlog::level::warn,
              "key {}: the claim was taken over before completion; response not stored",
              ctx.key_digest());
      break;
    case engine::Finish::store_failed:
      ctx.outcome = Outcome::executed;
      if (done.retrying) {
        ctx.log(spdlog::level::warn,
                "key {}: the response could not be stored yet; retrying in the background",
                ctx.key_digest());
      } else {
        ctx.log(spdlog::level::err,
                "key {}: the response could not be stored and the retry budget is spent; the "
                "record stays in flight",
                ctx.key_digest());
      }
      break;
  }
}

// The upstream failed after the request was sent: it may have acted. Retries are
// told the outcome is unknown (on_stale: fail) or execute again after the lease.
asio::awaitable<void> abandon(Flow& f, std::int64_t token, bool sent) {
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  const store::ClaimRequest& claim = *f.claim;
  const engine::Finish left = co_await rt.blocking(
      [&rt, &claim, token, sent] { return rt.coordinator.abandon(claim.id, token, sent); });
  if (sent) {
    ctx.log(spdlog::level::warn,
            "key {}: the upstream failed after the request was sent; record {}", ctx.key_digest(),
            left == engine::Finish::indeterminate ? "marked indeterminate"
                                                  : "left to its lease (store unreachable)");
  }
}

// The answer as the record keeps it: the head's storable fields, the body, trailers,
// and the ids of this request's trace.
store::StoredResponse as_kept(RequestContext& ctx, const ResponseHeader& head, std::string body,
                              Trailers trailers) {
  store::StoredResponse answer{static_cast<int>(head.result_int()), to_headers(head),
                               std::move(body), true,
                               std::vector<Header>(trailers.begin(), trailers.end())};
  answer.headers.push_back({std::string(store::kTraceIdEntry), ctx.trace()});
  keep_span_ids(ctx, answer);
  return answer;
}

// The head a retry attached to this stream gets: the holder's client's (the
// record's expiry and policy link included), as a replay.
std::vector<Header> attached_fields(const ResponseHeader& head) {
  std::vector<Header> fields = to_headers(head);
  // The upstream's own (a dedupe of its own said so) gives way to the proxy's.
  std::erase_if(fields, [](const Header& h) { return h.named("idempotent-replayed"); });
  fields.push_back({"Idempotent-Replayed", "true"});
  return fields;
}

// A stream published to this instance's retries while it flows: withdrawn on every
// way out, and cut unless it ended (LiveAnswer::end).
class Streaming {
 public:
  Streaming(Runtime& rt, const store::RecordId& id, std::shared_ptr<LiveAnswer> live)
      : rt_(rt), id_(id), live_(std::move(live)) {
    rt_.live.publish(id_, live_);
    rt_.coordinator.streaming(id_);
  }
  ~Streaming() {
    live_->cut();
    rt_.live.withdraw(id_, live_.get());
  }
  Streaming(const Streaming&) = delete;
  Streaming& operator=(const Streaming&) = delete;

 private:
  Runtime& rt_;
  const store::RecordId& id_;
  std::shared_ptr<LiveAnswer> live_;
};

}  // namespace

asio::awaitable<Step> execute(Flow& f) {
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  const store::ClaimRequest& claim = *f.claim;
  const std::int64_t token = f.decision.token;
  const auto& route = f.route();
  const auto& upstream = ctx.settings.config.upstream;
  // Held until the answer is recorded or the claim given up; whatever ends this
  // coroutine first gives it up (ClaimPermit).
  ClaimPermit permit(rt, claim.id, token);
  const auto t0 = Clock::now();
  // The lease is renewed while the upstream works and while its answer streams
  // (engine::LeaseSchedule).
  auto heartbeat =
      std::make_optional<engine::LeaseSchedule::Hold>(rt.leases, claim.id, token, route.lease);
  if (route.forward_fencing_token) {
    ctx.to_upstream.erase(kFencingTokenHeader);  // a takeover forwards again, with its own
    ctx.to_upstream.add_copy(kFencingTokenHeader, std::to_string(token));
  }
  const auto head_by = t0 + upstream_timeout(ctx, f.req);
  trace::Span up = start_upstream_span(ctx, f.req.base());
  permit.mark_sent();
  UpstreamHead started = co_await start_exchange(rt.upstream, f.req, ctx.to_upstream,
                                                 ctx.te_trailers, &ctx.ex, head_by);
  const double upstream_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  rt.metrics.observe_upstream(upstream_seconds);
  ctx.upstream_ms = upstream_seconds * 1000;
  // The body's first piece: an answer whole in it is recorded before it is sent.
  // A gRPC call's deadline (grpc-timeout) bounds all of it, a stream included.
  std::optional<Clock::time_point> stream_by;
  if (upstream.stream_timeout.count() > 0) stream_by = Clock::now() + upstream.stream_timeout;
  if (const auto deadline =
          ctx.grpc ? engine::parse_grpc_timeout(f.req["grpc-timeout"]) : std::nullopt) {
    stream_by = std::min(stream_by.value_or(Clock::time_point::max()), t0 + *deadline);
  }
  const auto next_by = [&] {
    const auto at = Clock::now() + upstream.read_timeout;
    return stream_by ? std::min(at, *stream_by) : at;
  };
  upstream::AnswerPiece first;
  if (!started.error) {
    const auto by = next_by();
    first = co_await started.call->read_body(by);
    if (first.error) {
      started.error = failed_after_sending(*started.call, first.error);
      started.sent = true;
    }
  }
  if (started.error) {
    heartbeat.reset();
    co_await abandon(f, token, started.sent);
    permit.settle();
    up.set_error(started.sent ? "upstream failed after the request was sent"
                              : "upstream unreachable");
    ctx.fail(*started.error, Outcome::upstream_error);
    co_return Step::failed;
  }
  upstream::UpstreamCall& call = *started.call;
  ResponseHeader& head = call.head();
  ctx.upstream_status = head.result_int();
  up.set_http_status(static_cast<int>(head.result_int()));
  up.end();
  strip_hop_by_hop(head);
  const std::string policy = policy_field(ctx, head);
  const std::uint64_t max_answer = upstream.max_response_size;
  engine::ReplayCache::Request& form = f.form;

  if (first.end && first.data.size() <= max_answer) {
    // Whole: recorded, then sent, with the record's expiry.
    heartbeat.reset();
    store::StoredResponse answer = as_kept(ctx, head, std::string(first.data), first.trailers);
    trace::Span completing = ctx.span.child(trace::kSpanStoreComplete);
    const engine::Completion done = co_await rt.complete(claim, token, route, answer, form);
    completing.end();
    permit.settle();
    note_completion(ctx, done, true);
    if (done.finish == engine::Finish::stored) announce_record(ctx, head, done.expires_at);
    head.erase(engine::kPolicyField);  // for the proxy, not the client
    co_await send_answer(ctx, head, first.data, first.trailers);
    co_return Step::responded;
  }

  // Streamed: the head goes now. Whether the answer is stored is known from its head
  // (store_status, no-store) but for a gRPC status, which its trailers bring.
  head.erase(engine::kPolicyField);
  store::StoredResponse kept = as_kept(ctx, head, {}, {});
  if (!policy.empty()) kept.headers.push_back({std::string(engine::kPolicyField), policy});
  if (!ctx.grpc && engine::Engine::stores(route, kept)) {
    // The store's own clock sets the record's expiry when it completes; the head
    // cannot wait for that, so it says when this proxy expects it.
    announce_record(ctx, head, SystemClock().now() + engine::Engine::retention(route, kept).answer);
  }
  Framing framing = call.framing();
  framing.trailers = framing.trailers || ctx.grpc;
  // Retries of this key that wait here attach to the stream from now on.
  auto live =
      std::make_shared<LiveAnswer>(token, head.result_int(), attached_fields(head), framing);
  const Streaming streaming(rt, claim.id, live);
  // The body is stored as it flows: whole in the record's row while it is small, in
  // chunks under the claim past that, up to the route's max_stored_answer.
  ChunkWriter body(rt, claim.id, token, route.max_stored_answer, live);
  if (!ctx.request_id.empty()) head.set("X-Request-Id", ctx.request_id);
  ctx.status = head.result_int();
  bool client = co_await ctx.ex.send_head(head, framing);
  // Retries of this key waiting on other instances attach to the stream from the
  // store: they need its head, with how its body is framed.
  if (route.on_concurrent == engine::OnConcurrent::wait &&
      (ctx.grpc || engine::Engine::stores(route, kept))) {
    store::StoredResponse recorded_head{
        static_cast<int>(head.result_int()), live->fields(), {}, true};
    recorded_head.headers.push_back({std::string(kFramingEntry), framing_entry(framing)});
    rt.start_stream(claim.id, token, std::move(recorded_head));
  }
  const auto streamed_from = Clock::now();
  trace::Span stream_span = ctx.span.child(trace::kSpanStream);
  // Each piece goes on as it comes but the last, which waits for the record: a client
  // that has the whole answer can retry at once and be replayed it. An HTTP/1.1
  // client knows a body framed by its length is whole once it has that many bytes,
  // which may come before the upstream says the answer ended (an HTTP/2 upstream's
  // END_STREAM in a frame of its own): the piece that completes the length is held
  // too, copied, until the record is written.
  std::uint64_t relayed = 0;
  std::string held;
  const auto relay = [&](std::string_view data) -> asio::awaitable<bool> {
    if (framing.kind == Framing::Kind::length && relayed + data.size() >= framing.length) {
      held.append(data);
      co_return true;
    }
    relayed += data.size();
    const Trailers none;
    co_return co_await ctx.ex.send_body(data, false, none);
  };
  if (client && !first.end) client = co_await relay(first.data);
  co_await body.add(first.data);
  upstream::AnswerPiece piece = first;
  std::vector<Header> trailers;
  if (piece.end) trailers.assign(piece.trailers.begin(), piece.trailers.end());
  // Read to the end even once the client has gone: the side effect happened, and
  // the record keeps its answer for the retry.
  while (!piece.end) {
    const auto by = next_by();
    piece = co_await call.read_body(by);
    if (piece.error) break;
    if (piece.end) {
      trailers.assign(piece.trailers.begin(), piece.trailers.end());
    } else if (client) {
      client = co_await relay(piece.data);
    }
    co_await body.add(piece.data);
  }
  heartbeat.reset();
  rt.metrics.observe_stream(std::chrono::duration<double>(Clock::now() - streamed_from).count());
  stream_span.set_int(trace::kIdempotencyStreamBytes, static_cast<std::int64_t>(body.streamed()));
  if (piece.error) {
    stream_span.set_error("the upstream's answer broke off mid-stream");
    stream_span.end();
    // Cut short: never passed off as whole, to this client or to a retry. The record
    // is marked first, so a retry made as soon as the stream broke is told so.
    ctx.log(spdlog::level::warn, "key {}: the upstream's answer broke off mid-stream: {}",
            ctx.key_digest(), piece.error.message());
    co_await abandon(f, token, true);
    permit.settle();
    if (client) co_await end_short(ctx, kGrpcUnavailable, "the upstream's answer broke off");
    ctx.outcome = Outcome::upstream_error;
    co_return Step::responded;
  }
  // The record keeps what the upstream sent, not the fields added for the client.
  const ChunkWriter::Kept kept_as = co_await body.finish(kept);
  const bool whole = kept_as != ChunkWriter::Kept::no;
  stream_span.set_int(trace::kIdempotencyStreamChunks, body.chunks());
  stream_span.end();
  if (whole) {
    kept.trailers = std::move(trailers);
  } else {
    ctx.log(spdlog::level::warn,
            "key {}: the response was streamed whole, but is not kept for retries: {}",
            ctx.key_digest(), body.why_not());
  }
  store::StoredResponse answer = whole ? std::move(kept) : status_only(call.head(), policy);
  // The completion takes the answer; its end goes to the attached retries after it.
  std::vector<Header> ended_with = answer.trailers;
  if (kept_as == ChunkWriter::Kept::unstored) {
    // The store failed under the stream: the chunks it has not taken and the
    // completion are retried in the background, as a completion the store failed.
    engine::Completion later;
    later.retrying = rt.complete_later(claim, token, route, std::move(answer), body.handed_over(),
                                       body.reserved());
    permit.settle();
    note_completion(ctx, later, whole);
  } else {
    trace::Span completing = ctx.span.child(trace::kSpanStoreComplete);
    const engine::Completion done = co_await rt.complete(claim, token, route, answer, form);
    completing.end();
    permit.settle();
    note_completion(ctx, done, whole);
  }
  live->end(std::move(ended_with));
  // What was held, then the last piece, its trailers and the end (the call keeps
  // what they view).
  if (client && !held.empty()) {
    const Trailers none;
    client = co_await ctx.ex.send_body(held, false, none);
  }
  if (client) co_await ctx.ex.send_body(piece.data, true, piece.trailers);
  co_return Step::responded;
}

}  // namespace idemproxy::proxy::idempotent
