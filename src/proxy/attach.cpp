// A retry attached to the stream its key's holder in this process is relaying
// (on_concurrent: wait, issue 44): one execution, every client given its answer as it
// flows. The bytes behind the stream's window come from the store's chunks, under
// the holder's token, a page at a time as the client takes them; the window's bytes
// come from memory; then the retry sleeps until the holder adds more. It ends as the
// holder's client does: whole once the answer is recorded, with its trailers; ended
// short (end_short: HTTP/1.1 closed short, HTTP/2 RST_STREAM, gRPC UNAVAILABLE) when
// the answer broke off or is not kept, never passed off as whole.
#include <spdlog/spdlog.h>

#include "idemproxy/common/sha256.hpp"
#include "proxy/phases.hpp"
#include "proxy/replay.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy::idempotent {
namespace {

using Read = LiveAnswer::Read;

// The body offset at which `chunk` starts.
std::uint64_t start_of(const store::Chunk& chunk) {
  return static_cast<std::uint64_t>(chunk.seq - 1) * kChunkBytes;
}

// Sends the bytes of `page` from body offset `at` on, up to `limit` and up to a gap (a
// chunk missing, or not stored yet: `at` stops before it), each piece also handed to
// `seen`; false when the client is gone.
template <class Seen>
asio::awaitable<bool> send_page(RequestContext& ctx, const std::vector<store::Chunk>& page,
                                std::uint64_t& at, std::uint64_t limit, Seen seen) {
  const Trailers none;
  for (const store::Chunk& chunk : page) {
    const std::uint64_t start = start_of(chunk);
    if (at < start) co_return true;
    const std::uint64_t end = std::min<std::uint64_t>(start + chunk.bytes.size(), limit);
    if (at >= end) continue;
    const std::string_view rest = std::string_view(chunk.bytes).substr(at - start, end - at);
    at = end;
    seen(rest);
    if (!co_await ctx.ex.send_body(rest, false, none)) co_return false;
  }
  co_return true;
}

// What a retry following a stream from the store (follow) has sent.
struct Followed {
  std::uint64_t at = 0;  // bytes of the body
  Sha256Stream digest;   // of them
  std::string prefix;    // the first kChunkBytes of them: a body kept whole is no longer
};

// send_page for follow, keeping what f says was sent.
asio::awaitable<bool> send_followed(RequestContext& ctx, const std::vector<store::Chunk>& page,
                                    Followed& f, std::uint64_t limit) {
  return send_page(ctx, page, f.at, limit, [&f](std::string_view rest) {
    f.digest.update(rest);
    if (f.prefix.size() < kChunkBytes)
      f.prefix.append(rest.substr(0, std::min(rest.size(), kChunkBytes - f.prefix.size())));
  });
}

// The byte at body offset `at`, if `page` holds it.
std::string byte_at(const std::vector<store::Chunk>& page, std::uint64_t at) {
  for (const store::Chunk& chunk : page) {
    const std::uint64_t start = start_of(chunk);
    if (at >= start && at - start < chunk.bytes.size()) return chunk.bytes.substr(at - start, 1);
  }
  return {};
}

}  // namespace

asio::awaitable<void> follow(Flow& f, const store::StoredResponse& head,
                             const std::shared_ptr<SignalWaiter>& waiter) {
  using Clock = std::chrono::steady_clock;
  RequestContext& ctx = f.ctx;
  Runtime& rt = f.rt();
  ctx.outcome = ops::Outcome::replayed;
  ctx.status = static_cast<unsigned>(head.status);
  ResponseHeader out;
  out.result(static_cast<unsigned>(head.status));
  http::Framing framing = http::Framing::unknown();
  for (const auto& field : head.headers) {
    if (field.name == kFramingEntry) {
      framing = parse_framing_entry(field.value);
    } else if (!field.name.starts_with(':')) {
      out.insert(field.name, field.value);
    }
  }
  if (!ctx.request_id.empty()) out.set("X-Request-Id", ctx.request_id);
  bool client = co_await ctx.ex.send_head(out, framing);
  rt.metrics.count_attached();

  const store::RecordId& id = f.claim->id;
  const std::int64_t token = f.decision.token;
  // The holder bounds each gap between pieces (upstream.read_timeout) and its lease
  // the rest; past both, it is gone.
  const Duration patience = ctx.settings.config.upstream.read_timeout + f.route().lease;
  // A body framed by its length is never given whole before its record completes.
  const std::uint64_t short_of = framing.kind == http::Framing::Kind::length && framing.length > 0
                                     ? framing.length - 1
                                     : std::numeric_limits<std::uint64_t>::max();
  Followed sent;
  auto heard = Clock::now();
  std::string cut;
  int cut_status = kGrpcUnavailable;
  std::optional<store::StoredResponse> done;
  while (client && cut.empty() && !done) {
    waiter->signal.clear();  // what is announced from now on wakes the wait below
    const auto from = static_cast<std::int32_t>(sent.at / kChunkBytes) + 1;
    auto page = co_await rt.blocking(
        [&rt, &id, token, from] { return rt.views().read_chunks(id, token, from, kReplayPage); });
    if (!page.ok()) {
      cut = "the store failed to read chunk " + std::to_string(from) + ": " + page.error().detail;
      break;
    }
    const std::uint64_t before = sent.at;
    client = co_await send_followed(ctx, page.value(), sent, short_of);
    if (sent.at > before) heard = Clock::now();
    const bool more = std::cmp_equal(page.value().size(), kReplayPage) &&
                      page.value().back().bytes.size() == kChunkBytes;
    if (!client || (sent.at > before && more)) continue;
    // Caught up: the record says whether the stream goes on.
    auto found = co_await rt.blocking([&rt, &id] { return rt.views().find(id); });
    if (!found.ok()) {
      cut = "the store failed to read the record: " + found.error().detail;
      break;
    }
    const std::optional<store::Record>& record = found.value();
    if (!record || record->token != token ||
        (record->state != store::RecordState::in_flight &&
         record->state != store::RecordState::completed)) {
      cut = "the original answer broke off";
      break;
    }
    if (record->stale) {  // its holder vanished: no more will come
      cut = "the original's holder stopped (its lease ran out)";
      break;
    }
    if (record->state == store::RecordState::completed) {
      if (!record->response || !record->response->body_stored) {
        cut = "the original answer is not kept";
        break;
      }
      done = record->response;
      break;
    }
    // Woken by the next announcement; or, with none, once the holder's lease would
    // have run out, to see whether it was renewed (a holder that vanished announces
    // nothing); or past the patience.
    const auto lease_left =
        std::max(std::chrono::duration_cast<Duration>(record->locked_until - record->store_now),
                 Duration{0});
    const auto until = std::min(heard + patience, Clock::now() + lease_left + Duration{100});
    if (!co_await waiter->signal.wait_until(until) && Clock::now() >= heard + patience)
      cut = "the original answer stalled";
  }
  // Completed: the rest of the body, checked against the record's, then its end.
  if (client && done) {
    const store::StoredResponse& answer = *done;
    const auto length = static_cast<std::uint64_t>(
        answer.chunked() ? answer.body_length : static_cast<std::int64_t>(answer.body.size()));
    if (answer.chunked()) {
      // A body framed by its length keeps its last byte back until everything checks;
      // one of unknown length, its end.
      const std::uint64_t held = short_of < length ? 1 : 0;
      std::string last;  // that byte, once read
      while (client && sent.at + last.size() < length) {
        const auto from = static_cast<std::int32_t>(sent.at / kChunkBytes) + 1;
        auto page = co_await rt.blocking([&rt, &id, token, from] {
          return rt.views().read_chunks(id, token, from, kReplayPage);
        });
        if (!page.ok()) break;
        const std::uint64_t before = sent.at;
        client = co_await send_followed(ctx, page.value(), sent, length - held);
        if (held > 0 && sent.at + 1 == length) last = byte_at(page.value(), sent.at);
        if (sent.at == before && last.empty()) break;  // a chunk is missing
      }
      if (!last.empty()) {
        sent.digest.update(last);
        ++sent.at;
      }
      if (client && sent.at == length && sent.digest.final() == answer.body_digest) {
        co_await ctx.ex.send_body(last, true, Trailers(answer.trailers));
        co_return;
      }
      if (client && cut.empty()) {
        cut = "the stored answer differs from the one followed, or a chunk is missing";
        cut_status = kGrpcDataLoss;
      }
    } else if (sent.at <= length &&
               std::string_view(answer.body).substr(0, sent.at) == sent.prefix) {
      co_await ctx.ex.send_body(std::string_view(answer.body).substr(sent.at), true,
                                Trailers(answer.trailers));
      co_return;
    } else if (client) {
      cut = "the stored answer differs from the one followed";
      cut_status = kGrpcDataLoss;
    }
  }
  if (!cut.empty()) {
    ctx.log(spdlog::level::warn, "key {}: the stream this retry followed ended short: {}",
            ctx.key_digest(), cut);
    if (client) co_await end_short(ctx, cut_status, "the original answer ended short");
    ctx.outcome = ops::Outcome::upstream_error;
  }
}

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
        client =
            co_await send_page(ctx, page.value(), at, std::numeric_limits<std::uint64_t>::max(),
                               [](std::string_view) {});
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
            ctx.key_digest(), cut);
    if (client) co_await end_short(ctx, kGrpcUnavailable, "the original answer ended short");
    ctx.outcome = ops::Outcome::upstream_error;
  }
}

}  // namespace idemproxy::proxy::idempotent
