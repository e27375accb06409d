// A whole request, as raw bytes from a client, fed through a real session: the
// proxy's HTTP parsing, framing checks, routing, key handling, body reading, claim,
// forwarding to a live (in-process) upstream, and the answer. The session runs on
// a loopback socket against the memory store.
// Properties: no crash, no sanitizer report, no hang (the session ends once the
// client has sent everything), and what the proxy writes back is HTTP: empty, or a
// response head that parses, with a status from 100 to 599.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "http/session.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/memory_store.hpp"

using namespace idemproxy;
using namespace idemproxy::http;

namespace {

// Answers every request it can parse with a small 201, keeping the connection.
asio::awaitable<void> upstream_connection(tcp::socket socket) {
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

asio::awaitable<void> upstream_server(tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(use_nothrow);
    if (ec) co_return;
    asio::co_spawn(acceptor.get_executor(), upstream_connection(std::move(socket)), asio::detached);
  }
}

struct World {
  World() : store(clock), upstream(io, {asio::ip::make_address("127.0.0.1"), 0}) {
    spdlog::set_level(spdlog::level::off);
    const std::string text =
        "upstream: {url: 'http://127.0.0.1:" + std::to_string(upstream.local_endpoint().port()) +
        "', timeout: 2s, max_response_size: 4KiB}\n"
        "store: {memory: {}}\n"
        "scope_key: fuzzing-scope-key-0123456789abcdef\n"
        "server: {header_timeout: 2s, read_timeout: 2s, idle_timeout: 2s, max_header_size: 4KiB}\n"
        "defaults: {max_body: 8KiB}\n"
        "routes:\n"
        "  - {name: orders, path_prefix: /v1/orders, key_required: true}\n"
        "  - {name: pay, path_prefix: /v1/pay, scope: {from: authorization}, on_concurrent: wait,"
        " lease: 1s}\n"
        "  - {name: shadow, path_prefix: /v1/shadow, mode: shadow}\n";
    auto cfg = config::parse_config(text, "fuzz.yaml", config::process_env());
    runtime = std::make_unique<Runtime>(io, std::make_shared<Settings>(std::move(cfg)), store,
                                        metrics, 1);
    asio::co_spawn(io, upstream_server(upstream), asio::detached);
  }

  asio::io_context io;
  SystemClock clock;
  store::MemoryStore store;
  ops::Metrics metrics;
  tcp::acceptor upstream;
  std::unique_ptr<Runtime> runtime;
  SessionTracker tracker;
};

asio::awaitable<void> read_all(tcp::socket& client, std::string& out, bool& done) {
  std::array<char, 4096> buf;
  for (;;) {
    auto [ec, n] = co_await client.async_read_some(asio::buffer(buf), use_nothrow);
    out.append(buf.data(), n);
    if (ec) break;
  }
  done = true;
}

bool looks_like_http(const std::string& out) {
  if (out.empty()) return true;
  bhttp::response_parser<bhttp::empty_body> head;
  head.skip(true);  // only the head is checked: a HEAD answer has no body
  beast::error_code ec;
  head.put(asio::buffer(out), ec);
  if (ec || !head.is_header_done()) return false;
  const unsigned status = head.get().result_int();
  return status >= 100 && status <= 599;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world;
  auto& io = world.io;
  // The client half-closes first, so each input leaves a TIME_WAIT entry behind for
  // a minute. At thousands of inputs a second those used up the ephemeral ports and
  // connect() failed (seen in CI). Each input connects from its own loopback source
  // address instead (127.1.0.0/16), so no two recent connections share a port space.
  static tcp::acceptor listener(io, {asio::ip::make_address("127.0.0.1"), 0});
  static std::uint32_t inputs = 0;
  const asio::ip::address_v4 source{0x7f010000u + (inputs++ & 0xffffu)};
  tcp::socket client(io, tcp::endpoint{source, 0});
  client.connect(listener.local_endpoint());
  tcp::socket server = listener.accept();
  asio::write(client, asio::buffer(data, size));  // small: fits the socket buffer
  client.shutdown(tcp::socket::shutdown_send);

  auto conn = std::make_shared<ClientConnection>(std::move(server), nullptr);
  bool served = false;
  asio::co_spawn(io, serve_connection(conn, *world.runtime, world.tracker),
                 [&served](std::exception_ptr e) {
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
  if (std::getenv("IDEMPROXY_FUZZ_PRINT")) std::fprintf(stderr, "%s\n---\n", out.c_str());
  if (!looks_like_http(out)) std::abort();
  return 0;
}
