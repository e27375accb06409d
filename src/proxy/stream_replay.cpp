// Replays an answer stored in chunks (issue 44): its head at once, then its chunks read
// from the store a page at a time, each sent before the next page is read, so the
// memory a replay holds is one page whatever the answer's size, and a slow client
// slows the reads (TCP's backpressure, HTTP/2's windows through send_body). The last
// chunk goes only once the body's length and digest match the record's: a chunk that
// is missing, altered or out of order ends the client's stream as an error (HTTP/1.1:
// closed before the body is whole; HTTP/2: RST_STREAM; gRPC: DATA_LOSS), never as a
// complete answer.
#include <spdlog/spdlog.h>

#include <array>

#include "idemproxy/common/sha256.hpp"
#include "proxy/forward.hpp"
#include "proxy/phases.hpp"
#include "proxy/replay.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy::idempotent {

asio::awaitable<void> replay_chunks(Flow& f, const engine::ReplayCache::Entry& e) {
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  const store::StoredResponse& stored = e.response;
  ctx.outcome = ops::Outcome::replayed;
  ctx.original_trace_id.assign(original_trace_id(stored));
  link_to_executing(ctx, stored);
  ctx.status = static_cast<unsigned>(stored.status);
  ResponseHeader head;
  head.result(static_cast<unsigned>(stored.status));
  for (const auto& field : e.fields) head.insert(field.name, field.value);
  if (const auto link = policy_link(ctx); !link.empty()) head.insert(bhttp::field::link, link);
  if (!ctx.request_id.empty()) head.set("X-Request-Id", ctx.request_id);
  const auto length = static_cast<std::uint64_t>(stored.body_length);
  const Framing framing = stored.trailers.empty() ? Framing::of(length) : Framing::unknown(true);
  bool client = co_await ctx.ex.send_head(head, framing);

  const store::RecordId& id = f.claim->id;
  const std::int64_t token = e.token;
  Sha256Stream digest;
  std::uint64_t sent = 0;
  std::int32_t next = 1;
  std::string broken;
  const Trailers none;
  while (client && broken.empty() && next <= stored.chunks) {
    auto page = co_await rt.blocking(
        [&rt, &id, token, &next] { return rt.views().read_chunks(id, token, next, kReplayPage); });
    if (!page.ok()) {
      broken =
          "the store failed to read chunk " + std::to_string(next) + ": " + page.error().detail;
      break;
    }
    if (page.value().empty()) {
      broken = "chunk " + std::to_string(next) + " is missing";
      break;
    }
    for (const store::Chunk& chunk : page.value()) {
      if (chunk.seq != next || chunk.seq > stored.chunks) {
        broken = "chunk " + std::to_string(next) + " is missing";
        break;
      }
      digest.update(chunk.bytes);
      sent += chunk.bytes.size();
      const bool last = chunk.seq == stored.chunks;
      if (last && (sent != length || digest.final() != stored.body_digest)) {
        broken = "the body's length or digest differs from the record's";
        break;
      }
      ++next;
      client =
          co_await ctx.ex.send_body(chunk.bytes, last, last ? Trailers(stored.trailers) : none);
      if (!client) break;
    }
  }
  if (!broken.empty()) {
    ctx.log(spdlog::level::err,
            "key {}: the stored answer cannot be replayed whole ({}); the stream is reset",
            ctx.key_hash.view(), broken);
    if (client)
      co_await end_short(ctx, kGrpcDataLoss, "the stored answer cannot be replayed whole");
    ctx.outcome = ops::Outcome::record_unreadable;
  }
}

asio::awaitable<void> end_short(RequestContext& ctx, int grpc_status, std::string_view why) {
  if (!ctx.grpc) {
    ctx.ex.reset();
    co_return;
  }
  const std::array<Header, 2> trailers{Header{"grpc-status", std::to_string(grpc_status)},
                                       Header{"grpc-message", std::string(why)}};
  co_await ctx.ex.send_body({}, true, trailers);
}

}  // namespace idemproxy::proxy::idempotent
