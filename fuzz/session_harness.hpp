#pragma once
// The loopback world the session fuzz targets share: an in-process upstream, the
// memory store, a Runtime from a config, and one client connection per input that
// sends the input, half-closes, and runs the session to its end.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/memory_store.hpp"
#include "proxy/policy_document.hpp"
#include "proxy/serve.hpp"
#include "server/listener.hpp"

namespace idemproxy::fuzz {

using namespace idemproxy::http;
using namespace idemproxy::proxy;
using namespace idemproxy::server;

/// Serves one upstream connection.
using UpstreamHandler = std::function<asio::awaitable<void>(tcp::socket)>;

class World {
 public:
  /// `config` is YAML without the upstream line, which names this world's upstream.
  World(const std::string& upstream_options, const std::string& config, UpstreamHandler handler)
      : store_(clock_),
        upstream_(io, {asio::ip::make_address("127.0.0.1"), 0}),
        listener_(io, {asio::ip::make_address("127.0.0.1"), 0}),
        handler_(std::move(handler)) {
    spdlog::set_level(spdlog::level::off);
    const std::string text =
        "upstream: {url: 'http://127.0.0.1:" + std::to_string(upstream_.local_endpoint().port()) +
        "', " + upstream_options + "}\n" + config;
    auto cfg = config::parse_config(text, "fuzz.yaml", config::process_env());
    runtime_ = std::make_unique<Runtime>(io, make_settings(std::move(cfg)), store_, metrics_, 1);
    service_ = std::make_unique<ProxyService>(*runtime_);
    asio::co_spawn(io, accept_upstream(), asio::detached);
  }

  /// Sends `input` on a new client connection from a loopback address of its own in
  /// `source_net` (a /16: at thousands of inputs a second, one source address ran
  /// out of ephemeral ports to TIME_WAIT entries), half-closes, and runs until the
  /// session ended and the client read everything. Returns what the client read.
  /// Aborts on a hang or an exception out of the session.
  std::string run(std::string_view input, std::uint32_t source_net) {
    const asio::ip::address_v4 source{source_net + (inputs_++ & 0xffffu)};
    tcp::socket client(io, tcp::endpoint{source, 0});
    tcp::socket server(io);
    // Asynchronously, on this loop: libFuzzer's timer signal interrupted a blocking
    // connect() (EINTR), and the exception aborted the run (seen in CI).
    int pending = 3;
    beast::error_code failed;
    const auto done = [&](beast::error_code ec, auto&&...) {
      if (ec) failed = ec;
      --pending;
    };
    listener_.async_accept(server, done);
    client.async_connect(listener_.local_endpoint(), [&](beast::error_code ec) {
      done(ec);
      asio::async_write(client, asio::buffer(input.data(), input.size()), done);
    });
    while (pending > 0) io.run_one();
    if (failed) std::abort();  // the harness, not the proxy, failed
    client.shutdown(tcp::socket::shutdown_send);

    auto conn = std::make_shared<ClientConnection>(std::move(server), nullptr);
    bool served = false;
    asio::co_spawn(io, serve_client(conn, *service_, tracker_), [&served](std::exception_ptr e) {
      if (e) std::abort();  // a session must never throw
      served = true;
    });
    std::string out;
    bool read_done = false;
    asio::co_spawn(io, read_all(client, out, read_done), asio::detached);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{8};
    while (!(served && read_done)) {
      io.run_one_for(std::chrono::milliseconds{100});
      if (std::chrono::steady_clock::now() > deadline) std::abort();  // a hang
    }
    for (int i = 0; i < 20 && io.poll() > 0; ++i) {
    }  // what is still in flight to the upstream
    return out;
  }

  asio::io_context io;

 private:
  asio::awaitable<void> accept_upstream() {
    for (;;) {
      auto [ec, socket] = co_await upstream_.async_accept(use_nothrow);
      if (ec) co_return;
      asio::co_spawn(io, handler_(std::move(socket)), asio::detached);
    }
  }

  static asio::awaitable<void> read_all(tcp::socket& client, std::string& out, bool& done) {
    std::array<char, 4096> buf;
    for (;;) {
      auto [ec, n] = co_await client.async_read_some(asio::buffer(buf), use_nothrow);
      out.append(buf.data(), n);
      if (ec) break;
    }
    done = true;
  }

  SystemClock clock_;
  store::MemoryStore store_;
  ops::Metrics metrics_;
  tcp::acceptor upstream_;
  tcp::acceptor listener_;
  UpstreamHandler handler_;
  std::unique_ptr<Runtime> runtime_;
  std::unique_ptr<ProxyService> service_;
  SessionTracker tracker_;
  std::uint32_t inputs_ = 0;
};

/// An upstream that answers every request it can parse with a small 201, keeping the
/// connection (fuzz_session, fuzz_h2).
inline asio::awaitable<void> answer_created(tcp::socket socket) {
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    StringRequest req;
    stream.expires_after(std::chrono::seconds{5});
    auto [ec, n] = co_await bhttp::async_read(stream, buffer, req, use_nothrow);
    if (ec) co_return;
    StringResponse res{bhttp::status::created, 11};
    res.set(bhttp::field::content_type, "application/json");
    res.body() = "{\"id\":1}";
    res.keep_alive(req.keep_alive());
    res.prepare_payload();
    auto [wec, w] = co_await bhttp::async_write(stream, res, use_nothrow);
    if (wec || !req.keep_alive()) co_return;
  }
}

/// Whether `out` is whole HTTP/2 frames (RFC 9113 §4.1) starting with the server's
/// SETTINGS (§3.4), or nothing.
inline bool whole_h2_frames(const std::string& out) {
  if (out.empty()) return true;
  if (out.size() < 9 || out[3] != 0x4) return false;  // the server's SETTINGS first
  std::size_t at = 0;
  while (at + 9 <= out.size()) {
    const auto* h = reinterpret_cast<const unsigned char*>(out.data() + at);
    const std::size_t length = (std::size_t{h[0]} << 16) | (std::size_t{h[1]} << 8) | h[2];
    if (length > 16384) return false;  // SETTINGS_MAX_FRAME_SIZE's default (§4.2)
    at += 9 + length;
  }
  return at == out.size();
}

/// One request parsed from the front of `bytes` by an independent Beast parser.
struct Parsed {
  beast::error_code error;
  std::size_t used = 0;
  StringRequest request;
};

/// A body longer than `bytes` cannot be whole in them, so the body limit is their size
/// and a body over it reads as "need more": the unbounded limit let string_body reserve
/// a declared Content-Length (2999999999999999999 asked ASan for 3 EB).
inline Parsed parse_request(std::string_view bytes) {
  RequestParser<bhttp::string_body> p;
  p.eager(true);
  p.body_limit(bytes.size());
  Parsed out;
  out.used = p.put(asio::buffer(bytes.data(), bytes.size()), out.error);
  if (out.error == bhttp::error::body_limit) out.error = bhttp::error::need_more;
  if (!out.error && !p.is_done()) out.error = bhttp::error::need_more;
  if (!out.error) out.request = p.release();
  return out;
}

}  // namespace idemproxy::fuzz
