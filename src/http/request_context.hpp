#pragma once
// One client connection, and the context one request carries through the phases.
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "http/beast.hpp"
#include "http/problem.hpp"
#include "http/request_target.hpp"
#include "http/runtime.hpp"
#include "http/stream.hpp"
#include "idemproxy/ops/logging.hpp"

namespace idemproxy::http {

/// What one request leaves for the next on its connection: strings that outgrow
/// std::string's 15 inline characters (a 32-digit request id or trace id, a long
/// target), whose memory is then taken once per connection rather than per request.
struct KeptStrings {
  std::string target;
  std::string request_id;
  std::string trace_id;
  RequestTarget normalized;  // the route phase's normalize_target() writes into it
};

struct ClientConnection {
  /// TLS when `tls` is given (tls.cert_file); the session then starts with the handshake.
  ClientConnection(tcp::socket socket, ssl::context* tls)
      : stream(tls ? Stream(std::move(socket), *tls) : Stream(std::move(socket))),
        secure(tls != nullptr) {}
  Stream stream;
  beast::flat_buffer buffer;
  /// Whether the client reached the proxy over TLS (X-Forwarded-Proto). A stream of an
  /// HTTP/2 connection is served over a local socket pair, so it inherits this, the
  /// peer address and the certificate subject from the connection.
  bool secure = false;
  bool h2_stream = false;  // one HTTP/2 stream, bridged (h2_connection.hpp)
  std::string peer_ip;
  std::string peer_subject;            // the verified client certificate's subject (mTLS)
  std::atomic<bool> idle{true};        // waiting for the next request (drain may close it)
  std::atomic<bool> reclaimed{false};  // chosen to close for a new client at the limit
  /// The memory of the fields of this connection's requests and of the upstream's
  /// answers to them, kept from one request for the next (arena.hpp).
  Arena arena;
  FieldsAllocator fields_allocator() { return FieldsAllocator{&arena}; }
  KeptStrings kept;
};

struct RequestContext {
  RequestContext(ClientConnection& c, Runtime& r, std::shared_ptr<const Settings> s)
      : client(c),
        rt(r),
        settings(std::move(s)),
        head(std::piecewise_construct, std::make_tuple(), std::make_tuple(c.fields_allocator())),
        target(reuse(c.kept.target)),
        request_id(reuse(c.kept.request_id)),
        trace_id(reuse(c.kept.trace_id)) {}
  ~RequestContext() {
    client.kept.target = std::move(target);
    client.kept.request_id = std::move(request_id);
    client.kept.trace_id = std::move(trace_id);
  }
  RequestContext(const RequestContext&) = delete;
  RequestContext& operator=(const RequestContext&) = delete;

  ClientConnection& client;
  Runtime& rt;
  std::shared_ptr<const Settings> settings;
  RequestParser<bhttp::empty_body> head;
  const engine::RoutePolicy* route = nullptr;
  unsigned version = 11;
  bool keep_alive = true;  // whether the connection may serve another request
  ops::Outcome outcome = ops::Outcome::passthrough;
  unsigned status = 0;
  std::string method;
  std::string target;
  std::string request_id;         // X-Request-Id: the client's, or one made here
  std::string trace_id;           // traceparent's trace id: the client's, or one started here
  std::string original_trace_id;  // a replay's: the trace id of the request that executed
  unsigned upstream_status = 0;
  double upstream_ms = 0;
  std::string key_hash;  // logged instead of the key
  bool grpc = false;     // a gRPC call: refusals are gRPC statuses (grpc_refusal)
  /// When the request's first bytes were at hand (not when the connection began to
  /// wait for it: a keep-alive connection's idle time is no request's). Set by the session.
  std::chrono::steady_clock::time_point started;

  std::optional<ProxyError> error;  // set by fail(); sent by send_problem()

  /// Records why the request fails; send_problem() then answers with it.
  /// (Errors travel in the context rather than as temporaries inside co_await
  /// expressions, which GCC 12 miscompiles.)
  void fail(ProblemKind kind, std::string detail, ops::Outcome why,
            std::optional<int> retry_after = std::nullopt) {
    error = ProxyError{kind, std::move(detail), retry_after, std::nullopt};
    outcome = why;
  }
  void fail(const ProxyError& e, ops::Outcome why) {
    error = e;
    outcome = why;
  }

  /// Logs an event of this request; the line carries its trace id.
  template <class... Args>
  void log(spdlog::level::level_enum level, spdlog::format_string_t<Args...> format,
           Args&&... args) const {
    const ops::TraceTag tag(trace_id);
    spdlog::log(level, format, std::forward<Args>(args)...);
  }

  /// A kept string's memory, emptied.
  static std::string reuse(std::string& kept) {
    std::string s = std::move(kept);
    s.clear();
    return s;
  }

  const std::string& route_name() const {
    static const std::string none = "-";
    return route ? route->name : none;
  }
};

/// Writes a response to the client under the read timeout; false if it failed.
asio::awaitable<bool> send_response(RequestContext& ctx, StringResponse& response);
/// Writes a cached replay whose head is serialized (entry.head not empty) to an
/// HTTP/1.1 client in one gathered write; false if it failed.
asio::awaitable<bool> send_cached(RequestContext& ctx, const engine::ReplayCache::Entry& entry);
/// Sends ctx.error as a problem response; false when the connection must close.
asio::awaitable<bool> send_problem(RequestContext& ctx);

/// Answers `Expect: 100-continue` before the body is read; false if that failed.
asio::awaitable<bool> continue_if_expected(RequestContext& ctx);

/// Streams an upstream answer to the client: its head (from `parser`), `prefix` (body
/// bytes already read), then the rest; keeps `conn` for reuse when it can.
asio::awaitable<bool> stream_response(RequestContext& ctx,
                                      std::unique_ptr<UpstreamConnection>& conn,
                                      StreamingParser& parser, std::string_view prefix);
/// Whether an enabled route covers this request's method: its rules apply, whether
/// or not the request carries a key.
bool covered(const RequestContext& ctx);
/// The published policy's Link field value (`<...>; rel="describedby"`) for this
/// request's problems and stored answers: "" unless a route covers it, a policy is
/// published, and the client is not gRPC (whose metadata it would clutter).
std::string_view policy_link(const RequestContext& ctx);

/// Streams a request no route protects to the upstream and the answer back.
asio::awaitable<bool> pass_through(RequestContext& ctx);
/// The idempotent path: key, body, fingerprint, claim, forward, record, respond.
/// Without `key_header`, the key is in the body at the route's key_json_pointer.
asio::awaitable<bool> run_idempotent(RequestContext& ctx,
                                     std::optional<std::string_view> key_header);

}  // namespace idemproxy::http
