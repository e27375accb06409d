#pragma once
// Replays: a stored answer laid out once, at its first replay, then sent to each
// retry with Idempotent-Replayed: true.
#include <string>

#include "http/beast.hpp"
#include "idemproxy/engine/replay_cache.hpp"
#include "idemproxy/store/store.hpp"
#include "proxy/http_names.hpp"

namespace idemproxy::proxy {

struct RequestContext;

/// The trace id a stored response was executed under, or "" (records written before
/// 0.2, or answers too large to store).
std::string_view original_trace_id(const store::StoredResponse& stored);

/// Readies an entry before it is cached (the coordinator's prepare_replay hook): a
/// gRPC trailers-only answer's trailers joined to its head again.
void prepare_replay(engine::ReplayCache::Entry& entry);

/// The entry's replay, laid out at its first replay and kept with it for the next:
/// its fields (the stored ones but the record's own entries, Idempotent-Replayed,
/// Idempotency-Key-Expires), and a place for the codec that sends it to keep its own
/// form (the HTTP/1.1 codec's head). Safe from any thread.
const engine::ReplayCache::Entry::Layout& replay_layout(const engine::ReplayCache::Entry& entry);

/// Starts a cached or stored replay: its outcome when the client took it at once (a
/// coroutine frame saved), or nothing, and then ctx.ex.finish_prepared() is awaited
/// for it. `entry` must stay valid until then.
std::optional<bool> start_replay(RequestContext& ctx, const engine::ReplayCache::Entry& entry);
/// Sends a cached or stored replay; false when the client could not take it.
asio::awaitable<bool> send_replay(RequestContext& ctx, const engine::ReplayCache::Entry& entry);

}  // namespace idemproxy::proxy
