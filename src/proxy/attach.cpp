// A retry attached to the stream its key's holder in this process is relaying
// (on_concurrent: wait, issue 44): one execution, every client given its answer as it
// flows. The bytes behind the stream's window come from the store's chunks, under
// the holder's token, a page at a time as the client takes them; the window's bytes
// come from memory; then the retry sleeps until the holder adds more. It ends as the
// holder's client does: whole once the answer is recorded, with its trailers; ended
// short (end_short: HTTP/1.1 closed short, HTTP/2 RST_STREAM, gRPC UNAVAILABLE) when
// the answer broke off or is not kept, never passed off as whole.
#include <spdlog/spdlog.h>

#include "proxy/phases.hpp"
#include "proxy/replay.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy::idempotent {
namespace {

using Read = LiveAnswer::Read;

// Sends the bytes of `page` from body offset `at` on; false when the client is gone
// or the page does not hold `at` (a chunk missing).
asio::awaitable<bool> send_page(RequestContext& ctx, const std::vector<store::Chunk>& page,
                                std::uint64_t& at) {
  const Trailers none;
  for (const store::Chunk& chunk : page) {
    const std::uint64_t start = static_cast<std::uint64_t>(chunk.seq - 1) * kChunkBytes;
    if (at < start) co_return false;
    if (at >= start + chunk.bytes.size()) continue;
    const std::string_view rest = std::string_view(chunk.bytes).substr(at - start);
    at += rest.size();
    if (!co_await ctx.ex.send_body(rest, false, none)) co_return false;
  }
  co_return true;
}

}  // namespace

asio::awaitable<void> attach(Flow& f, const std::shared_ptr<LiveAnswer>& live,
                             const std::shared_ptr<SignalWaiter>& waiter) {
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  ctx.outcome = ops::Outcome::replayed;
  ctx.status = live->status();
  ResponseHeader head;
  head.result(live->status());
  for (const auto& field : live->fields()) head.insert(field.name, field.value);
  if (!ctx.request_id.empty()) head.set("X-Request-Id", ctx.request_id);
  bool client = co_await ctx.ex.send_head(head, live->framing());
  rt.metrics.count_attached();

  const store::RecordId& id = f.claim->id;
  const std::int64_t token = live->token();
  // The holder bounds each gap between pieces (upstream.read_timeout) and its lease
  // the rest; past both, it is gone.
  const Duration patience = ctx.settings.config.upstream.read_timeout + f.route().lease;
  std::uint64_t at = 0;
  std::string cut;
  const Trailers none;
  while (client && cut.empty()) {
    waiter->signal.clear();
    Read r = live->read(at, waiter);
    switch (r.kind) {
      case Read::Kind::in_store: {
        const std::int32_t from = r.chunk;
        auto page = co_await rt.blocking([&rt, &id, token, from] {
          return rt.views().read_chunks(id, token, from, kReplayPage);
        });
        if (!page.ok() || page.value().empty()) {
          cut = page.ok() ? "chunk " + std::to_string(from) + " is missing"
                          : "the store failed to read chunk " + std::to_string(from) + ": " +
                                page.error().detail;
          break;
        }
        const std::uint64_t before = at;
        client = co_await send_page(ctx, page.value(), at);
        if (client && at == before) cut = "chunk " + std::to_string(from) + " is missing";
        break;
      }
      case Read::Kind::bytes:
        at += r.bytes.size();
        client = co_await ctx.ex.send_body(r.bytes, false, none);
        break;
      case Read::Kind::ended:
        co_await ctx.ex.send_body(r.bytes, true, Trailers(r.trailers));
        co_return;
      case Read::Kind::cut:
        cut = "the original answer broke off, or is not kept";
        break;
      case Read::Kind::pending:
        if (!co_await waiter->signal.wait_until(std::chrono::steady_clock::now() + patience))
          cut = "the original answer stalled";
        break;
    }
  }
  if (!cut.empty()) {
    ctx.log(spdlog::level::warn, "key {}: the stream this retry attached to ended short: {}",
            ctx.key_hash.view(), cut);
    if (client) co_await end_short(ctx, kGrpcUnavailable, "the original answer ended short");
    ctx.outcome = ops::Outcome::upstream_error;
  }
}

}  // namespace idemproxy::proxy::idempotent
