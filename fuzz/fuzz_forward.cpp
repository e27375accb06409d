// Differential: raw client bytes through a real session, compared with what reaches
// the upstream (issue 10). The client's bytes are parsed by an independent Beast
// parser (the reference); the upstream records the exact bytes it received.
// Properties, for any input:
// - the upstream's bytes parse as a sequence of whole requests, with nothing left
//   over (no stray last-chunk, no bytes of one request read as the next);
// - each forwarded request has exactly one framing (one Content-Length, or chunked,
//   never both) and no trailer section;
// - each forwarded body is the body of a request the client sent, in order: the
//   proxy adds nothing and mixes nothing up.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "http/session.hpp"
#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/store/memory_store.hpp"

using namespace idemproxy;
using namespace idemproxy::http;

namespace {

std::string received;  // every byte the upstream got for the current input

asio::awaitable<void> upstream_connection(tcp::socket socket) {
  std::array<char, 4096> buf;
  beast::flat_buffer parse_buffer;
  for (;;) {
    // Reads raw bytes; answers a 201 per complete request it can parse.
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) co_return;
    received.append(buf.data(), n);
    auto room = parse_buffer.prepare(n);
    asio::buffer_copy(room, asio::buffer(buf.data(), n));
    parse_buffer.commit(n);
    for (;;) {
      bhttp::request_parser<bhttp::string_body> p;
      p.eager(true);
      p.body_limit(boost::none);
      beast::error_code pec;
      const auto used = p.put(parse_buffer.data(), pec);
      if (pec || !p.is_done()) break;
      parse_buffer.consume(used);
      const std::string answer = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
      auto [wec, w] = co_await asio::async_write(socket, asio::buffer(answer), use_nothrow);
      if (wec) co_return;
    }
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
    // No pooled connections: each input's requests go over connections of its own.
    const std::string text =
        "upstream: {url: 'http://127.0.0.1:" + std::to_string(upstream.local_endpoint().port()) +
        "', timeout: 2s, max_response_size: 4KiB, max_idle_connections: 1}\n"
        "store: {memory: {}}\n"
        "server: {header_timeout: 2s, read_timeout: 2s, idle_timeout: 2s, body_timeout: 2s,"
        " max_header_size: 4KiB}\n"
        "defaults: {max_body: 8KiB}\n"
        "routes:\n"
        "  - {name: orders, path_prefix: /v1/orders}\n";
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

asio::awaitable<void> drain(tcp::socket& client, bool& done) {
  std::array<char, 4096> buf;
  for (;;) {
    auto [ec, n] = co_await client.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) break;
  }
  done = true;
}

// The bodies of the requests in `bytes`, parsed one after another, until one fails.
std::vector<std::string> client_bodies(std::string_view bytes) {
  std::vector<std::string> bodies;
  while (!bytes.empty()) {
    bhttp::request_parser<bhttp::string_body> p;
    p.eager(true);
    p.body_limit(boost::none);
    beast::error_code ec;
    const auto used = p.put(asio::buffer(bytes.data(), bytes.size()), ec);
    if (ec || !p.is_done()) break;
    bodies.push_back(p.get().body());
    bytes.remove_prefix(used);
  }
  return bodies;
}

void check_forwarded(const std::string& input) {
  const std::vector<std::string> sent = client_bodies(input);
  std::string_view rest = received;
  std::size_t next = 0;  // forwarded bodies are a subsequence of the client's
  while (!rest.empty()) {
    bhttp::request_parser<bhttp::string_body> p;
    p.eager(true);
    p.body_limit(boost::none);
    beast::error_code ec;
    const auto used = p.put(asio::buffer(rest.data(), rest.size()), ec);
    // A request the client stopped sending mid-body is cut short, then closed.
    if (ec == bhttp::error::need_more) break;
    if (ec || !p.is_done()) std::abort();  // stray bytes reached the upstream
    const auto& req = p.get();
    const auto lengths = req.count(bhttp::field::content_length);
    if (lengths > 1 || (lengths == 1 && req.count(bhttp::field::transfer_encoding) > 0)) {
      std::abort();  // two framings
    }
    if (req[bhttp::field::content_length].find(',') != std::string_view::npos) std::abort();
    while (next < sent.size() && sent[next] != req.body()) ++next;
    if (next == sent.size()) std::abort();  // a body the client never sent, or out of order
    ++next;
    rest.remove_prefix(used);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world;
  auto& io = world.io;
  static tcp::acceptor listener(io, {asio::ip::make_address("127.0.0.1"), 0});
  static std::uint32_t inputs = 0;
  const asio::ip::address_v4 source{0x7f020000u + (inputs++ & 0xffffu)};  // see fuzz_session
  received.clear();
  tcp::socket client(io, tcp::endpoint{source, 0});
  client.connect(listener.local_endpoint());
  tcp::socket server = listener.accept();
  asio::write(client, asio::buffer(data, size));
  client.shutdown(tcp::socket::shutdown_send);

  auto conn = std::make_shared<ClientConnection>(std::move(server), nullptr);
  bool served = false;
  asio::co_spawn(io, serve_connection(conn, *world.runtime, world.tracker),
                 [&served](std::exception_ptr e) {
                   if (e) std::abort();
                   served = true;
                 });
  bool read_done = false;
  asio::co_spawn(io, drain(client, read_done), asio::detached);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds{8};
  while (!(served && read_done)) {
    io.run_one_for(std::chrono::milliseconds{100});
    if (std::chrono::steady_clock::now() > deadline) std::abort();
  }
  // Let the upstream read what is still in flight to it.
  for (int i = 0; i < 20 && io.poll() > 0; ++i) {
  }
  check_forwarded(std::string(reinterpret_cast<const char*>(data), size));
  return 0;
}
