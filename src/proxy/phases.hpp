#pragma once
// The phases of the idempotent path and what they share (flow.cpp runs them in
// order; the intake phases are in intake.cpp).
#include <memory>
#include <optional>
#include <string_view>
#include <variant>

#include "http/signal.hpp"
#include "idemproxy/engine/coordinator.hpp"
#include "proxy/buffered.hpp"
#include "proxy/context.hpp"
#include "proxy/http_names.hpp"
#include "proxy/live_answer.hpp"

namespace idemproxy::proxy::idempotent {

/// What a phase hands back to the driver.
enum class Step {
  next,       // go on to the next phase
  responded,  // the client has its answer, or cannot be given one
  failed,     // ctx.error says why; the driver sends it
};

/// What a phase returns: its step, when it could decide at once, or the work still
/// to await. A phase that decides at once (most intake phases, most of the time) is a
/// plain function: it makes no coroutine frame, and only a slower path (a forward, a
/// replay) starts a coroutine for the driver to await.
using PhaseStep = std::variant<Step, asio::awaitable<Step>>;

/// What the phases share, beside the request context.
struct Flow {
  Flow(RequestContext& c, std::optional<std::string_view> k)
      : ctx(c),
        key_header(k),
        req(std::piecewise_construct, std::make_tuple(), std::make_tuple(c.ex.fields_allocator())) {
    req.body() = RequestContext::reuse(c.ex.kept().body);  // a body over 15 bytes: no new block
  }
  /// The request's end (its access line, its span) outlives the key it names: hashed
  /// now when either will read it.
  ~Flow() {
    if (ops::access_log_enabled() || ctx.span.recording()) ctx.key_digest();
    ctx.key = nullptr;
    if (req.body().capacity() <= http::KeptStrings::kBodyCapacity) {
      ctx.ex.kept().body = std::move(req.body());
    }
  }
  Flow(const Flow&) = delete;
  Flow& operator=(const Flow&) = delete;

  RequestContext& ctx;
  std::optional<std::string_view> key_header;  // none: the key is in the body
  store::RecordId id;
  StringRequest req;  // the request as read, then as forwarded
  std::shared_ptr<const engine::ReplayCache::Entry> hit;
  std::optional<store::ClaimRequest> claim;
  engine::ReplayCache::Request form;  // the request as fingerprinted
  engine::Decision decision;

  Runtime& rt() { return ctx.rt; }
  const engine::RoutePolicy& route() const { return *ctx.route; }
  bool shadow() const { return ctx.route->mode == engine::Mode::shadow; }
  bool key_in_body() const { return !key_header; }
};

/// The idempotent path over `flow`: key, body, fingerprint, claim, forward, record,
/// respond. The phases that decide at once run here; the first that does not hands the
/// rest to a coroutine, which the caller awaits. `flow` lives until that ends.
Answering run(Flow& flow);

// Wakes a waiting request from any thread: the wake is posted to the request's own
// executor (a strand), where its signal lives, since timers are not thread-safe. A
// wake that lands before the request starts sleeping is kept by the signal.
class SignalWaiter final : public engine::Waiter,
                           public std::enable_shared_from_this<SignalWaiter> {
 public:
  explicit SignalWaiter(const asio::any_io_executor& ex) : signal(ex) {}
  void wake() override {
    asio::post(signal.executor(), [self = shared_from_this()] { self->signal.notify(); });
  }
  Signal signal;
};

/// Forwards f.req under the claim, relays the answer as it arrives (one that ends
/// with its first piece is recorded before it is sent), and has the coordinator
/// record it (execute.cpp).
asio::awaitable<Step> execute(Flow& f);

/// Replays f.decision's answer stored in chunks (stream_replay.cpp): its chunks read
/// from the store a page at a time as the client takes them; ended short (end_short),
/// never passed off as whole, when one is missing or altered.
asio::awaitable<void> replay_chunks(Flow& f, const engine::ReplayCache::Entry& e);
/// Ends a client's stream whose answer cannot be given whole, after its head: a gRPC
/// call gets trailers with `grpc_status` and `why` (a gRPC client reads a reset as
/// INTERNAL); any other stream is reset (HTTP/1.1 closed short, HTTP/2 RST_STREAM).
asio::awaitable<void> end_short(RequestContext& ctx, int grpc_status, std::string_view why);
inline constexpr int kGrpcUnavailable = 14;
inline constexpr int kGrpcDataLoss = 15;
/// Chunks read per page of a replay: with 256 KiB chunks 4 MiB a page, and two pages
/// held (one sent, the next read). Each page is a statement, and PostgreSQL's work per
/// statement was a fifth of its work per GiB at 4 a page: a GiB's replay took it 2.6
/// to 3.1 CPU-s at 4 a page, 2.1 to 2.6 at 16 (docs/PERFORMANCE.md).
inline constexpr int kReplayPage = 16;

/// Attaches a retry to the stream its key's holder in this process is relaying
/// (attach.cpp): the head, the bytes so far (from the store's chunks, then the
/// stream's window), then each piece as it lands, to the same end as the holder's
/// client: whole once the answer is recorded, cut when it broke off. `waiter` is the
/// request's own, woken by the stream.
asio::awaitable<void> attach(Flow& f, const std::shared_ptr<LiveAnswer>& live,
                             const std::shared_ptr<SignalWaiter>& waiter);

/// Attaches a retry to the stream its key's holder on another instance relays,
/// from the store (attach.cpp): `head` (the record's, Record::streaming), then the
/// stored chunks, including the one being filled, as they are announced; whole once
/// the record completes and what was sent matches its body, cut otherwise. `waiter`
/// is the request's own, registered for the record's announcements.
asio::awaitable<void> follow(Flow& f, const store::StoredResponse& head,
                             const std::shared_ptr<SignalWaiter>& waiter);

/// Forwards f.req without a claim (fail_open, shadow mode, or a route whose key is
/// optional and absent), answering with outcome `f.decision.outcome`.
asio::awaitable<Step> forward_unprotected(Flow& f);

/// Sends an upstream answer read whole: its trailers, and the fields the proxy adds.
asio::awaitable<bool> respond(RequestContext& ctx, UpstreamAnswer& answer);

/// How long the upstream has for this request: upstream.timeout, or a gRPC call's
/// shorter deadline (grpc-timeout).
Duration upstream_timeout(const RequestContext& ctx, const RequestHeader& head);

/// Intake: the key from its header and the scope; the body; the key from the body
/// (key_json_pointer); the key's age; a replay of the very same bytes from memory;
/// the fingerprint (and a replay of the same request in other bytes).
PhaseStep key_phase(Flow& f);
/// The scope a request's records live in on `route`: derived from the request as the
/// route says (scope.from, scope_header, namespace). key_phase and the lookup share it.
std::string record_scope(const engine::RoutePolicy& route, RequestContext& ctx);
PhaseStep body_phase(Flow& f);
PhaseStep body_key_phase(Flow& f);
PhaseStep key_age_phase(Flow& f);
PhaseStep cached_phase(Flow& f);
/// Answers from f.hit (a replay cache hit): no database round trip, no commit.
PhaseStep replay_cached(Flow& f);
PhaseStep fingerprint_phase(Flow& f);
/// The request's fingerprint under `rule`: the route's, or a record's own (a record
/// made under another rule is judged under that one).
std::string request_fingerprint(const Flow& f, const engine::FingerprintRule& rule);

}  // namespace idemproxy::proxy::idempotent
