#include "trace/otlp_http.hpp"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <stdexcept>

namespace idemproxy::trace {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

constexpr std::size_t kMaxResponse = std::size_t{1} << 20;  // an export answer is small

std::optional<std::chrono::seconds> parse_retry_after(std::string_view v) {
  // RFC 9110 10.2.3: an HTTP-date or delay-seconds; only the second is read (an
  // HTTP-date falls back to the exporter's own backoff).
  unsigned long long secs = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), secs);
  if (ec != std::errc{} || end != v.data() + v.size()) return std::nullopt;
  return std::chrono::seconds{static_cast<long long>(std::min(secs, 86400ULL))};
}

template <class Stream>
asio::awaitable<void> exchange(Stream& stream, const bhttp::request<bhttp::string_body>& req,
                               PostResult& result) {
  co_await bhttp::async_write(stream, req, asio::use_awaitable);
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::string_body> parser;
  parser.body_limit(kMaxResponse);
  co_await bhttp::async_read(stream, buffer, parser, asio::use_awaitable);
  auto& res = parser.get();
  result.status = static_cast<int>(res.result_int());
  result.body = std::move(res.body());
  if (const auto it = res.find(bhttp::field::retry_after); it != res.end()) {
    result.retry_after = parse_retry_after(it->value());
  }
}

asio::awaitable<void> post_once(const config::TracingConfig& target, asio::ssl::context* tls,
                                const bhttp::request<bhttp::string_body>& req, PostResult& result) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  const auto endpoints =
      co_await resolver.async_resolve(target.host, target.port, asio::use_awaitable);
  beast::tcp_stream tcp_stream(ex);
  co_await tcp_stream.async_connect(endpoints, asio::use_awaitable);
  tcp_stream.socket().set_option(tcp::no_delay(true));
  if (tls == nullptr) {
    co_await exchange(tcp_stream, req, result);
    co_return;
  }
  beast::ssl_stream<beast::tcp_stream> stream(std::move(tcp_stream), *tls);
  beast::error_code ec;
  asio::ip::make_address(target.host, ec);
  // SNI carries host names only (RFC 6066 3).
  if (ec) SSL_set_tlsext_host_name(stream.native_handle(), target.host.c_str());
  stream.set_verify_callback(asio::ssl::host_name_verification(target.host));
  co_await stream.async_handshake(asio::ssl::stream_base::client, asio::use_awaitable);
  co_await exchange(stream, req, result);
}

std::string host_field(const config::TracingConfig& t) {
  const bool ipv6 = t.host.find(':') != std::string::npos;
  std::string host = ipv6 ? "[" + t.host + "]" : t.host;
  const bool default_port = t.port == (t.tls ? "443" : "80");
  return default_port ? host : host + ":" + t.port;  // RFC 9110 7.2
}

}  // namespace

bool retryable(int status) {
  return status == 0 || status == 429 || status == 502 || status == 503 || status == 504;
}

OtlpHttpClient::OtlpHttpClient(config::TracingConfig target, std::string user_agent)
    : target_(std::move(target)),
      user_agent_(std::move(user_agent)),
      host_field_(host_field(target_)) {
  if (target_.tls) {
    tls_ = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
    SSL_CTX_set_min_proto_version(tls_->native_handle(), TLS1_2_VERSION);
    tls_->set_verify_mode(asio::ssl::verify_peer);
    tls_->set_default_verify_paths();  // throws at start, never per export
  }
}

PostResult OtlpHttpClient::post(const std::string& body, Duration timeout,
                                const std::function<bool()>& abandon) {
  bhttp::request<bhttp::string_body> req{bhttp::verb::post, target_.target, 11};
  req.set(bhttp::field::host, host_field_);
  req.set(bhttp::field::user_agent, user_agent_);
  req.set(bhttp::field::content_type, "application/json");
  req.set(bhttp::field::connection, "close");
  for (const auto& [name, value] : target_.headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();

  PostResult result;
  bool done = false;
  {
    // A fresh io_context per export: when the timeout runs out, destroying it
    // abandons whatever step was pending (resolve, connect, read) and closes the socket.
    asio::io_context io;
    asio::co_spawn(io, post_once(target_, tls_.get(), req, result),
                   [&](const std::exception_ptr& e) {
                     done = true;
                     if (!e) return;
                     try {
                       std::rethrow_exception(e);
                     } catch (const boost::system::system_error& failure) {
                       result.status = 0;
                       result.error = failure.code().message();
                     } catch (const std::exception& failure) {
                       result.status = 0;
                       result.error = failure.what();
                     }
                   });
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (!done && !abandon()) {
      const auto left = deadline - std::chrono::steady_clock::now();
      if (left <= Duration::zero()) break;
      io.run_for(
          std::min<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds{20}));
    }
  }
  if (!done) {
    result = PostResult{};
    result.error = "no answer within " + std::to_string(timeout.count()) + " ms";
  }
  return result;
}

}  // namespace idemproxy::trace
