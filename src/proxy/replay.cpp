#include "proxy/replay.hpp"

#include "idemproxy/engine/grpc_status.hpp"
#include "proxy/context.hpp"
#include "proxy/forward.hpp"
#include "proxy/spans.hpp"

namespace idemproxy::proxy {
namespace {

bool is_grpc_answer(const store::StoredResponse& stored) {
  for (const auto& h : stored.headers) {
    if (beast::iequals(h.name, "content-type")) return engine::is_grpc_content_type(h.value);
  }
  return false;
}

}  // namespace

std::string_view original_trace_id(const store::StoredResponse& stored) {
  for (const auto& h : stored.headers) {
    if (h.name == store::kTraceIdEntry) return h.value;
  }
  return {};
}

void prepare_replay(engine::ReplayCache::Entry& e) {
  // gRPC's trailers-only answer (a status, no message) is one HEADERS frame with
  // END_STREAM, and is replayed as one: a record an earlier version kept as a head
  // and trailers has them joined again, so the replay's metadata is the original's.
  if (e.response.body.empty() && !e.response.chunked() && !e.response.trailers.empty() &&
      is_grpc_answer(e.response)) {
    for (auto& t : e.response.trailers) e.response.headers.push_back(std::move(t));
    e.response.trailers.clear();
  }
}

const engine::ReplayCache::Entry::Layout& replay_layout(const engine::ReplayCache::Entry& e) {
  engine::ReplayCache::Entry::Later& later = *e.layout;
  std::call_once(later.once, [&] {
    const auto& stored = e.response;
    auto& fields = later.made.fields;
    fields.reserve(stored.headers.size() + 2);
    for (const auto& h : stored.headers) {
      if (!h.name.starts_with(':')) fields.push_back(h);  // kTraceIdEntry stays in the record
    }
    fields.push_back({"Idempotent-Replayed", "true"});
    fields.push_back({kExpiresHeader, http_date(e.expires_at)});
  });
  return later.made;
}

std::optional<bool> start_replay(RequestContext& ctx, const engine::ReplayCache::Entry& entry) {
  ctx.outcome = ops::Outcome::replayed;
  ctx.original_trace_id.assign(original_trace_id(entry.response));
  link_to_executing(ctx, entry.response);
  ctx.status = static_cast<unsigned>(entry.response.status);
  const auto& layout = replay_layout(entry);
  const PreparedAnswer answer{static_cast<unsigned>(entry.response.status), layout.fields,
                              entry.response.body, entry.response.trailers, &layout.codec_form};
  // In the order a replay built per request had them.
  std::array<ExtraField, 2> extra;
  std::size_t count = 0;
  if (const auto link = policy_link(ctx); !link.empty()) extra[count++] = {"Link", link};
  if (!ctx.request_id.empty()) extra[count++] = {"X-Request-Id", ctx.request_id};
  return ctx.ex.start_prepared(answer, std::span<const ExtraField>(extra.data(), count));
}

asio::awaitable<bool> send_replay(RequestContext& ctx, const engine::ReplayCache::Entry& entry) {
  if (const auto sent = start_replay(ctx, entry)) co_return *sent;
  co_return co_await ctx.ex.finish_prepared();
}

}  // namespace idemproxy::proxy
