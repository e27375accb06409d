#pragma once
// The HTTP/2 upstream link's parts, shared by h2_upstream.cpp (the nghttp2 session,
// its loops and the registry of links) and h2_upstream_bridge.cpp (each exchange
// carried across the socket pair the HTTP/1.1 pool is handed).
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/local/stream_protocol.hpp>
#include <cstring>
#include <deque>
#include <sstream>

#include "http/fields.hpp"
#include "http/problem.hpp"
#include "http/signal.hpp"
#include "http/tls.hpp"
#include "idemproxy/engine/grpc_status.hpp"
#include "upstream/h2_upstream.hpp"

namespace idemproxy::http {
namespace h2 {

using Pipe = asio::local::stream_protocol::socket;

// Per-stream flow-control window (SETTINGS_INITIAL_WINDOW_SIZE) toward the upstream.
inline constexpr std::uint32_t kStreamWindow = 128 * 1024;
// Request bytes a stream holds here before the bridge stops reading the request.
inline constexpr std::size_t kOutHighWater = std::size_t{256} * 1024;

inline nghttp2_nv nv(const std::string& name, const std::string& value) {
  return {reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
          value.size(), NGHTTP2_NV_FLAG_NONE};
}

inline std::vector<nghttp2_nv> nv_list(
    const std::vector<std::pair<std::string, std::string>>& fields) {
  std::vector<nghttp2_nv> nva;
  nva.reserve(fields.size());
  for (const auto& [name, value] : fields) nva.push_back(nv(name, value));
  return nva;
}

inline std::string lower_case(std::string_view name) {
  std::string out;
  http::lower_case(name, out);
  return out;
}

inline void append_chunk(std::string& to, std::string_view data) {
  char size[20];
  const int n = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  to.append(size, static_cast<std::size_t>(n));
  to.append(data);
  to.append("\r\n");
}

constexpr std::int32_t kConnectionWindow = 1 << 20;
constexpr std::size_t kWriteBatch = std::size_t{64} * 1024;
constexpr std::size_t kMaxHeadBytes = std::size_t{1} << 20;
// Request bodies up to this size are kept while their stream runs, so a stream the
// upstream refuses unprocessed (GOAWAY, REFUSED_STREAM) can go again.
constexpr std::size_t kResendBody = std::size_t{1} << 20;

using Fields = std::vector<std::pair<std::string, std::string>>;

/// Wakes every waiting coroutine once it is opened; opening is for good.
class Latch {
 public:
  explicit Latch(const asio::any_io_executor& ex)
      : timer_(ex, std::chrono::steady_clock::time_point::max()) {}
  void open() {
    open_ = true;
    timer_.cancel();
  }
  asio::awaitable<void> wait() {
    while (!open_) co_await timer_.async_wait(use_nothrow);
  }

 private:
  asio::steady_timer timer_;
  bool open_ = false;
};

// Answers a request that never reached the upstream (no connection could carry
// it, or the upstream refused its stream unprocessed, RFC 9113 §8.7): a 502 the
// session takes for the upstream's, so the claim is released and a retry runs it.
inline asio::awaitable<void> not_sent(Pipe& pipe, const std::string& why) {
  spdlog::info("upstream HTTP/2: a request was not sent: {}", why);
  auto res = problem_response({ProblemKind::upstream_unreachable,
                               "the request was not sent: " + why, std::nullopt, std::nullopt});
  res.keep_alive(false);
  res.prepare_payload();
  std::ostringstream bytes;
  bytes << res;
  const std::string out = bytes.str();
  co_await asio::async_write(pipe, asio::buffer(out), use_nothrow);
}

/// One request on its way up and its answer on its way back.
struct Call {
  explicit Call(const asio::any_io_executor& ex) : room(ex), news(ex) {}

  std::int32_t id = -1;
  std::string out;  // request body bytes not yet taken by nghttp2
  std::size_t out_at = 0;
  bool out_end = false;
  bool out_deferred = false;
  Signal room;  // nghttp2 took request bytes, or the stream closed

  Fields block;  // the header block being received
  std::size_t block_bytes = 0;
  std::deque<std::pair<unsigned, Fields>> interim;  // 1xx answers not yet passed on
  std::optional<std::pair<unsigned, Fields>> head;  // the final answer's head
  bool head_taken = false;
  std::string in;  // answer body bytes not yet written to the session
  bool in_end = false;
  Fields trailers;
  bool closed = false;
  std::uint32_t close_code = 0;
  Signal news;  // a head, body bytes, the end, or the close
};

class UpstreamLink;

/// A request as sent on a stream: its fields, and its body while it is small enough
/// to send again (kResendBody).
struct Outgoing {
  Fields fields;
  std::string body;
  bool resendable = true;
  bool head_request = false;
  bool keep_alive = true;
  /// The client takes trailers (te: trailers; every gRPC call): the answer goes on
  /// chunked even when it has a content-length, which cannot carry them.
  bool trailers = false;
};

/// The upstream's HTTP/2 connections, shared by H2Upstream and by the links, which
/// hand a request to another link when theirs can no longer carry it.
struct Registry : std::enable_shared_from_this<Registry> {
  Registry(asio::any_io_executor executor, const config::UpstreamConfig& upstream,
           ssl::context* context, bool per_link_strands)
      : ex(std::move(executor)), config(upstream), tls(context), strands(per_link_strands) {}

  asio::any_io_executor ex;
  const config::UpstreamConfig& config;
  ssl::context* tls;
  bool strands;
  std::mutex mu;
  std::vector<std::shared_ptr<UpstreamLink>> links;

  /// A link with room for another stream (upstream.http2_max_streams), or a new one
  /// (on `established`'s executor when given); its bridge count already includes
  /// the caller.
  std::shared_ptr<UpstreamLink> pick(const http::Stream* established);
};

/// One HTTP/2 connection to the upstream and the bridges that use it. Everything
/// runs on its executor (a strand with several I/O threads).
class UpstreamLink : public std::enable_shared_from_this<UpstreamLink> {
 public:
  UpstreamLink(asio::any_io_executor ex, const config::UpstreamConfig& config, ssl::context* tls,
               std::weak_ptr<Registry> registry)
      : ex_(std::move(ex)),
        config_(config),
        tls_(tls),
        registry_(std::move(registry)),
        ready_(ex_),
        writable_(ex_) {}
  ~UpstreamLink() {
    if (session_ != nullptr) nghttp2_session_del(session_);
  }
  UpstreamLink(const UpstreamLink&) = delete;
  UpstreamLink& operator=(const UpstreamLink&) = delete;

  const asio::any_io_executor& executor() const { return ex_; }
  /// No new bridges: the connection failed, or the upstream sent GOAWAY.
  bool closed_to_new() const { return closed_to_new_.load(); }
  std::atomic<std::size_t> bridges{0};

  asio::awaitable<std::pair<beast::error_code, std::optional<tcp::socket>>> open_bridge(
      asio::any_io_executor near_ex, std::unique_ptr<http::Stream> established);
  /// Sends again, on this connection, a request another refused unprocessed.
  asio::awaitable<void> resend(Pipe& pipe, Outgoing& request);
  /// Carries one request read by another link's bridge (that link is closing), then
  /// asks its session to close the socket pair.
  asio::awaitable<void> carry(Pipe& pipe, beast::flat_buffer& buffer,
                              RequestParser<bhttp::buffer_body>& parser);

  // nghttp2's callbacks.
  int on_header(const nghttp2_frame& frame, std::string_view name, std::string_view value);
  int on_frame_recv(const nghttp2_frame& frame);
  int on_data(std::int32_t id, const std::uint8_t* data, std::size_t size);
  int on_stream_close(std::int32_t id, std::uint32_t code);
  ssize_t read_body(std::int32_t id, std::uint8_t* buf, std::size_t size, std::uint32_t* flags);

 private:
  /// Connects (or adopts `established`) once; every caller waits for the outcome.
  asio::awaitable<beast::error_code> ready(std::unique_ptr<http::Stream> established);
  asio::awaitable<beast::error_code> connect();
  void start_session();
  asio::awaitable<void> read_loop();
  asio::awaitable<void> write_loop();
  asio::awaitable<void> bridge(std::shared_ptr<Pipe> pipe);
  asio::awaitable<bool> exchange(Pipe& pipe, beast::flat_buffer& buffer,
                                 RequestParser<bhttp::buffer_body>& parser, bool last);
  /// Submits a request's HEADERS (its body, if any, comes from the Call).
  std::shared_ptr<Call> start_call(const Outgoing& request, bool has_body);
  /// Writes a call's answer to the session as HTTP/1.1; false: the pair must close.
  asio::awaitable<bool> relay_answer(Pipe& pipe, std::shared_ptr<Call> call, Outgoing& request);
  void fail(const char* why);
  std::shared_ptr<Call> find(std::int32_t id) const {
    const auto it = calls_.find(id);
    return it == calls_.end() ? nullptr : it->second;
  }
  void wake_writer() { writable_.notify(); }

  asio::any_io_executor ex_;
  const config::UpstreamConfig& config_;
  ssl::context* tls_;
  std::weak_ptr<Registry> registry_;
  std::unique_ptr<http::Stream> stream_;
  nghttp2_session* session_ = nullptr;
  enum class State { fresh, connecting, ready, failed } state_ = State::fresh;
  beast::error_code connect_error_;
  Latch ready_;
  Signal writable_;
  std::atomic<bool> closed_to_new_{false};
  std::map<std::int32_t, std::shared_ptr<Call>> calls_;
};

}  // namespace h2
}  // namespace idemproxy::http
