// Replays an answer stored in chunks (issue 44): its head at once, then its chunks read
// from the store a page at a time, the next read while one is sent, so the memory a
// replay holds is two pages whatever the answer's size, and a slow client slows the
// reads (TCP's backpressure, HTTP/2's windows through send_body). The last
// chunk goes only once the body's length and digest match the record's: a chunk that
// is missing, altered or out of order ends the client's stream as an error (HTTP/1.1:
// closed before the body is whole; HTTP/2: RST_STREAM; gRPC: DATA_LOSS), never as a
// complete answer.
#include <spdlog/spdlog.h>

#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>

#include "idemproxy/common/sha256.hpp"
#include "proxy/forward.hpp"
#include "proxy/phases.hpp"
#include "proxy/replay.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy::idempotent {

namespace {

using Page = store::Result<std::vector<store::Chunk>>;

asio::awaitable<Page> read_page(Runtime& rt, const store::RecordId& id, std::int64_t token,
                                std::int32_t from) {
  co_return co_await rt.blocking(
      [&rt, &id, token, from] { return rt.views().read_chunks(id, token, from, kReplayPage); });
}

// Sends a page's chunks in order, checking each against what the record says: the
// chunk expected next, and at the last one the body's length and digest. `broken`
// says what is wrong, and nothing past it is sent. Returns whether the client is
// still there.
struct Sending {
  explicit Sending(const store::StoredResponse& of) : stored(of) {}

  const store::StoredResponse& stored;
  std::int32_t next = 1;
  std::uint64_t sent = 0;
  Sha256Stream digest;
  std::string broken;

  asio::awaitable<bool> page(RequestContext& ctx, const std::vector<store::Chunk>& chunks) {
    const Trailers none;
    for (const store::Chunk& chunk : chunks) {
      if (chunk.seq != next || chunk.seq > stored.chunks) {
        broken = "chunk " + std::to_string(next) + " is missing";
        co_return true;
      }
      digest.update(chunk.bytes);
      sent += chunk.bytes.size();
      const bool last = chunk.seq == stored.chunks;
      if (last && (sent != static_cast<std::uint64_t>(stored.body_length) ||
                   digest.final() != stored.body_digest)) {
        broken = "the body's length or digest differs from the record's";
        co_return true;
      }
      ++next;
      if (!co_await ctx.ex.send_body(chunk.bytes, last, last ? Trailers(stored.trailers) : none)) {
        co_return false;
      }
    }
    co_return true;
  }
};

}  // namespace

asio::awaitable<void> replay_chunks(Flow& f, const engine::ReplayCache::Entry& e) {
  using namespace asio::experimental::awaitable_operators;
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  const store::StoredResponse& stored = e.response;
  ctx.outcome = ops::Outcome::replayed;
  ctx.original_trace_id.assign(original_trace_id(stored));
  link_to_executing(ctx, stored);
  ctx.status = static_cast<unsigned>(stored.status);
  ResponseHeader head;
  head.result(static_cast<unsigned>(stored.status));
  for (const auto& field : replay_layout(e).fields) head.insert(field.name, field.value);
  if (const auto link = policy_link(ctx); !link.empty()) head.insert(bhttp::field::link, link);
  if (!ctx.request_id.empty()) head.set("X-Request-Id", ctx.request_id);
  const auto length = static_cast<std::uint64_t>(stored.body_length);
  const Framing framing = stored.trailers.empty() ? Framing::of(length) : Framing::unknown(true);
  bool client = co_await ctx.ex.send_head(head, framing);

  // The next page is read while this one is sent, so the database and the client's
  // socket work at once: one page ahead, two held (docs/PERFORMANCE.md).
  const store::RecordId& id = f.claim->id;
  Sending out(stored);
  Page page = store::StoreError{store::StoreErrc::unavailable, "not read"};
  if (client && stored.chunks > 0) page = co_await read_page(rt, id, e.token, 1);
  while (client && out.broken.empty() && out.next <= stored.chunks) {
    if (!page.ok()) {
      out.broken =
          "the store failed to read chunk " + std::to_string(out.next) + ": " + page.error().detail;
      break;
    }
    if (page.value().empty()) {
      out.broken = "chunk " + std::to_string(out.next) + " is missing";
      break;
    }
    const auto after = static_cast<std::int32_t>(out.next + std::ssize(page.value()));
    if (after > stored.chunks) {
      client = co_await out.page(ctx, page.value());
      break;
    }
    auto [ahead, still] =
        co_await (read_page(rt, id, e.token, after) && out.page(ctx, page.value()));
    page = std::move(ahead);
    client = still;
  }
  if (!out.broken.empty()) {
    ctx.log(spdlog::level::err,
            "key {}: the stored answer cannot be replayed whole ({}); the stream is reset",
            ctx.key_digest(), out.broken);
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
