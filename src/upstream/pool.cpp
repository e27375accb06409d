#include "upstream/pool.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <array>
#include <cerrno>

#include "http/chunk.hpp"
#include "http/fields.hpp"
#include "http/head_bytes.hpp"
#include "http/parse_buffered.hpp"
#include "http/tls.hpp"
#include "upstream/relay.hpp"

namespace idemproxy::http {
namespace {

// A pooled connection the upstream has closed reads as EOF; one still open would
// block. Checking before reuse avoids sending a request into a dead socket.
bool still_open(tcp::socket& socket) {
  char byte = 0;  // one syscall: no toggling of the socket's blocking mode
  const auto n = ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

ProxyError upstream_error(ProblemKind kind, const std::string& detail) {
  return ProxyError{kind, detail, std::nullopt, std::nullopt};
}

StreamingParserPtr new_parser(bool head_request, boost::optional<std::uint64_t> body_limit,
                              const FieldsAllocator& fields) {
  // In the arena the answer's fields use: one heap allocation fewer per exchange.
  // (Making a parser allocates nothing, so nothing can throw between the two steps.)
  ArenaAllocator<StreamingParser> memory(fields);
  StreamingParserPtr parser(::new (memory.allocate(1)) StreamingParser(
      std::piecewise_construct, std::make_tuple(), std::make_tuple(fields)));
  parser->header_limit(64 * 1024);
  parser->body_limit(body_limit);
  if (head_request) parser->skip(true);
  return parser;
}

// The parser adds a chunked answer's trailers to its fields, after the head's: they
// are taken out, to be kept and replayed as trailers (Trailer, RFC 9110 6.6.2, is a
// connection field: it is never kept).
std::vector<store::Header> take_trailers(ResponseHeader& head, const FieldMark& head_fields) {
  auto trailers = head_fields.added(head);
  head_fields.erase_added(head);
  return trailers;
}

// A server sends few interim answers; an endless stream of them is an attack.
constexpr int kMaxInterim = 16;

// te is hop-by-hop in HTTP/1.1 (RFC 9110 10.1.4); the proxy keeps "te: trailers" for
// an HTTP/2 upstream only (forward.cpp), and auto may have found HTTP/1.1.
void drop_te(RequestHeader& head) {
  if (head.find(bhttp::field::te) != head.end()) head.erase(bhttp::field::te);
}

// One exchange on a pooled HTTP/1.1 connection (UpstreamCall): relay.cpp's functions,
// and the connection back to the pool once the answer is read.
class Http1Call final : public UpstreamCall {
 public:
  Http1Call(UpstreamPool& pool, std::unique_ptr<UpstreamConnection> conn,
            StreamingParserPtr parser = {})
      : pool_(pool), conn_(std::move(conn)), parser_(std::move(parser)) {}
  /// A call in `memory` (made allocates nothing that could throw after the memory
  /// is taken: the members are moved in).
  static UpstreamCallPtr make(FieldsAllocator memory, UpstreamPool& pool,
                              std::unique_ptr<UpstreamConnection> conn,
                              StreamingParserPtr parser = {}) {
    ArenaAllocator<Http1Call> typed(memory);
    auto* call = ::new (typed.allocate(1)) Http1Call(pool, std::move(conn), std::move(parser));
    call->memory_ = memory;
    return UpstreamCallPtr(call);
  }
  void destroy() noexcept override {
    ArenaAllocator<Http1Call> typed(memory_);
    this->~Http1Call();
    typed.deallocate(this, 1);
  }

  // These hand back relay.cpp's coroutines as they are, not awaited in a coroutine of
  // their own: a frame fewer each, on every request (docs/PERFORMANCE.md, "What
  // remains"). What they pass by reference is the caller's or this call's.
  asio::awaitable<RelayError> send_request(RequestHeader& head, Exchange& from, Duration timeout,
                                           std::optional<Exchange::TimePoint> deadline,
                                           BodyPiece::Error& read_error,
                                           beast::error_code& write_error) override {
    drop_te(head);
    return http::send_request(*conn_, head, from, timeout, deadline, read_error, write_error);
  }

  asio::awaitable<beast::error_code> read_final_head(bool head_request,
                                                     boost::optional<std::uint64_t> body_limit,
                                                     const InterimSink& sink,
                                                     FieldsAllocator fields,
                                                     Duration timeout) override {
    conn_->stream.expires_after(timeout);
    return http::read_final_head(*conn_, parser_, head_request, body_limit, sink, fields);
  }

  ResponseHeader& head() override { return parser_->get().base(); }

  asio::awaitable<RelayError> relay_answer(std::string_view prefix, bool head_request,
                                           bool /*grpc: a chunked answer carries its trailers*/,
                                           Exchange& to, Duration timeout,
                                           beast::error_code& read_error) override {
    return http::relay_answer(*conn_, *parser_, prefix, head_request, to, timeout, read_error,
                              answer_read_);
  }

 private:
  FieldsAllocator memory_;
  UpstreamPool& pool_;
  std::unique_ptr<UpstreamConnection> conn_;
  StreamingParserPtr parser_;
  /// The connection goes back to the pool once the answer is read. The parser's
  /// keep_alive() is what the head said, from its parse: the caller strips the
  /// Connection field from the message before the relay. (One pointer captured:
  /// std::function holds it without a heap call.)
  std::function<void()> answer_read_ = [this] {
    if (parser_->keep_alive() && !parser_->need_eof()) pool_.give_back(std::move(conn_));
  };
};

}  // namespace

asio::awaitable<beast::error_code> read_final_head(UpstreamConnection& conn,
                                                   StreamingParserPtr& parser, bool head_request,
                                                   boost::optional<std::uint64_t> body_limit,
                                                   const InterimSink& sink,
                                                   FieldsAllocator fields) {
  for (int interim = 0;; ++interim) {
    parser = new_parser(head_request, body_limit, fields);
    auto [ec, n] =
        co_await bhttp::async_read_header(conn.stream, conn.buffer, *parser, use_nothrow);
    if (ec) co_return ec;
    const unsigned status = parser->get().result_int();
    if (status / 100 != 1) co_return ec;
    if (status == 101 || interim == kMaxInterim) co_return bhttp::error::bad_status;
    if (status == 100 || sink.client == nullptr) continue;
    auto& head = parser->get().base();
    strip_hop_by_hop(head);
    // A client that cannot take the 1xx will fail the final answer's write too.
    co_await sink.client->send_interim(head);
  }
}

UpstreamPool::UpstreamPool(asio::any_io_executor ex, const config::UpstreamConfig& config,
                           bool strands)
    : ex_(std::move(ex)), config_(config), strands_(strands) {
  using Protocol = config::UpstreamConfig::Protocol;
  if (config_.tls.enabled) {
    tls_ = make_upstream_tls(config_.tls);
    if (config_.protocol != Protocol::http1) {
      offer_upstream_alpn(*tls_, config_.protocol == Protocol::automatic);
    }
    if (config_.tls.insecure_skip_verify) {
      spdlog::warn(
          "upstream.tls.insecure_skip_verify: the certificate of {} is NOT verified; "
          "anyone on the path can read and answer requests",
          config_.url);
    }
  }
  if (config_.protocol != Protocol::http1) {
    h2_ = std::make_unique<H2Upstream>(ex_, config_, tls_.get(), strands_);
  }
}

UpstreamPool::~UpstreamPool() = default;

bool UpstreamPool::over_h2() const {
  using Protocol = config::UpstreamConfig::Protocol;
  return h2_ && (config_.protocol != Protocol::automatic || auto_h2_);
}

asio::awaitable<std::pair<beast::error_code, UpstreamCallPtr>> UpstreamPool::open_call(
    FieldsAllocator memory) {
  using Result = std::pair<beast::error_code, UpstreamCallPtr>;
  if (over_h2()) co_return co_await h2_->open_call();
  std::unique_ptr<Stream> h2;
  auto [ec, conn] = co_await acquire(false, h2);
  if (h2) co_return co_await h2_->open_call(std::move(h2));
  if (ec) co_return Result{ec, nullptr};
  co_return Result{ec, Http1Call::make(memory, *this, std::move(conn))};
}

asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>>
UpstreamPool::acquire(bool fresh, std::unique_ptr<Stream>& h2) {
  while (!fresh) {
    std::unique_ptr<UpstreamConnection> conn;
    {
      std::lock_guard lock(mu_);
      if (idle_.empty()) break;
      conn = std::move(idle_.back());
      idle_.pop_back();
    }
    if (still_open(conn->stream.socket())) {
      conn->reused = true;
      co_return std::make_pair(beast::error_code{}, std::move(conn));
    }
  }
  co_return co_await connect(h2);
}

asio::awaitable<std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>>
UpstreamPool::connect(std::unique_ptr<Stream>& h2) {
  using Result = std::pair<beast::error_code, std::unique_ptr<UpstreamConnection>>;
  // Each connection has its own strand: Beast's timeout handler and the socket's
  // completions must not run concurrently when several I/O threads run.
  const asio::any_io_executor ex = strands_ ? asio::any_io_executor(asio::make_strand(ex_)) : ex_;
  auto conn = std::make_unique<UpstreamConnection>(ex, tls_.get());
  prepare_upstream_tls(conn->stream, config_);
  tcp::resolver resolver(ex_);
  auto [rec, endpoints] = co_await resolver.async_resolve(config_.host, config_.port, use_nothrow);
  if (rec) co_return Result{rec, nullptr};
  conn->stream.expires_after(config_.connect_timeout);
  auto [cec, ep] = co_await conn->stream.transport().async_connect(endpoints, use_nothrow);
  if (cec) co_return Result{cec, nullptr};
  beast::error_code ignored;
  conn->stream.socket().set_option(tcp::no_delay(true), ignored);
  if (auto* tls = conn->stream.tls()) {
    auto [hec] = co_await tls->async_handshake(ssl::stream_base::client, use_nothrow);
    if (hec) co_return Result{hec, nullptr};
  }
  if (h2_ && alpn_chose_h2(conn->stream)) {
    // auto: the upstream speaks HTTP/2; this connection becomes the first shared one.
    auto_h2_ = true;
    conn->stream.expires_never();
    h2 = std::make_unique<Stream>(std::move(conn->stream));
    co_return Result{beast::error_code{}, nullptr};
  }
  co_return Result{beast::error_code{}, std::move(conn)};
}

void UpstreamPool::give_back(std::unique_ptr<UpstreamConnection> conn) {
  if (!conn || conn->buffer.size() != 0) return;  // leftover bytes: framing is off
  // With one I/O thread every owner runs where the last did: its timer wait can stay.
  if (strands_) {
    conn->stream.expires_never();
  } else {
    conn->stream.expires_never_on_one_thread();
  }
  std::lock_guard lock(mu_);
  if (idle_.size() < config_.max_idle_connections) idle_.push_back(std::move(conn));
}

asio::awaitable<UpstreamAnswer> UpstreamPool::round_trip(StringRequest& request,
                                                         const InterimSink& interim,
                                                         Duration timeout) {
  if (over_h2()) co_return co_await h2_->round_trip(request, interim, timeout);
  drop_te(request.base());
  UpstreamAnswer out;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::unique_ptr<Stream> h2;
    auto [ec, conn] = co_await acquire(attempt > 0, h2);
    if (h2) co_return co_await h2_->round_trip(request, interim, timeout, std::move(h2));
    if (ec) {
      out.error = upstream_error(ProblemKind::upstream_unreachable,
                                 "cannot connect to the upstream: " + ec.message());
      co_return out;
    }
    conn->stream.expires_after(timeout);  // bounds the whole exchange
    const HeadBytes head = serialize_head(request.base());
    const std::array<asio::const_buffer, 2> message{asio::buffer(head),
                                                    asio::buffer(request.body())};
    auto [wec, written] = co_await asio::async_write(conn->stream, message, use_nothrow);
    if (wec) {
      if (conn->reused && attempt == 0) continue;  // a stale keep-alive connection
      out.error = upstream_error(ProblemKind::upstream_unreachable,
                                 "the upstream closed the connection before the request was sent");
      co_return out;
    }
    out.sent = true;
    conn->buffer.reserve(kBodyReadSize);
    StreamingParserPtr parser;
    // The body is bounded below; an oversized one is streamed.
    auto rec = co_await read_final_head(*conn, parser, request.method() == bhttp::verb::head,
                                        boost::none, interim);
    std::optional<FieldMark> head_fields;
    if (!rec) head_fields.emplace(parser->get());
    std::string body;
    Chunk chunk;
    const auto limit = config_.max_response_size;
    while (!rec && !parser->is_done()) {
      if (body.size() > limit || parser->content_length().value_or(0) > limit) {
        out.oversized = UpstreamAnswer::Oversized{
            Http1Call::make({}, *this, std::move(conn), std::move(parser)), std::move(body)};
        co_return out;
      }
      parser->get().body().data = chunk.data();
      parser->get().body().size = chunk.size();
      if (!parse_buffered(conn->buffer, *parser, rec)) {
        std::tie(rec, std::ignore) =
            co_await bhttp::async_read_some(conn->stream, conn->buffer, *parser, use_nothrow);
      }
      if (rec == bhttp::error::need_buffer) rec = {};
      body.append(chunk.data(), chunk.size() - parser->get().body().size);
    }
    if (rec == beast::error::timeout) {
      out.error =
          upstream_error(ProblemKind::upstream_timeout, "the upstream did not answer in time");
    } else if (rec) {
      out.error = upstream_error(
          ProblemKind::upstream_failed,
          "the upstream connection failed after the request was sent: " + rec.message());
    }
    if (out.error) co_return out;
    if (body.size() > limit) {  // the last read went past the limit and finished the body
      out.oversized = UpstreamAnswer::Oversized{
          Http1Call::make({}, *this, std::move(conn), std::move(parser)), std::move(body)};
      co_return out;
    }
    if (parser->chunked()) out.trailers = take_trailers(parser->get(), *head_fields);
    out.response = StringResponse(std::move(parser->get().base()), std::move(body));
    if (out.response.keep_alive()) give_back(std::move(conn));
    co_return out;
  }
  co_return out;
}

}  // namespace idemproxy::http
