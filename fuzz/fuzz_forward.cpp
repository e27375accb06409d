// Differential: raw client bytes through a real session, compared with what reaches
// the upstream (issue 10). The client's bytes are parsed by an independent Beast
// parser (the reference); the upstream records the exact bytes it received.
// Properties, for any input:
// - the upstream's bytes parse as a sequence of whole requests, with nothing left
//   over (no stray last-chunk, no bytes of one request read as the next); a request
//   the client abandoned mid-body may be cut short, then closed;
// - each forwarded request has exactly one framing (one Content-Length value, or
//   chunked, never both);
// - each forwarded body is the body of a request the client sent, in order: the
//   proxy adds nothing and mixes nothing up.
#include <vector>

#include "session_harness.hpp"

using namespace idemproxy::fuzz;

namespace {

std::string received;  // every byte the upstream got for the current input

// Records the raw bytes; answers a 201 per complete request it can parse.
asio::awaitable<void> upstream_connection(tcp::socket socket) {
  std::array<char, 4096> buf;
  std::string pending;
  for (;;) {
    auto [ec, n] = co_await socket.async_read_some(asio::buffer(buf), use_nothrow);
    if (ec) co_return;
    received.append(buf.data(), n);
    pending.append(buf.data(), n);
    for (Parsed p = parse_request(pending); !p.error; p = parse_request(pending)) {
      pending.erase(0, p.used);
      static const std::string kAnswer = "HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}";
      auto [wec, w] = co_await asio::async_write(socket, asio::buffer(kAnswer), use_nothrow);
      if (wec) co_return;
    }
  }
}

void check_forwarded(std::string_view input) {
  std::vector<std::string> sent;  // the client's bodies, until its bytes stop parsing
  for (Parsed p = parse_request(input); !p.error; p = parse_request(input)) {
    sent.push_back(p.request.body());
    input.remove_prefix(p.used);
  }
  std::string_view rest = received;
  std::size_t next = 0;  // forwarded bodies are a subsequence of the client's
  while (!rest.empty()) {
    const Parsed p = parse_request(rest);
    if (p.error == bhttp::error::need_more) break;  // cut short by the client
    if (p.error) std::abort();                      // stray bytes reached the upstream
    const auto& req = p.request;
    const auto lengths = req.count(bhttp::field::content_length);
    if (lengths > 1 || (lengths == 1 && req.count(bhttp::field::transfer_encoding) > 0)) {
      std::abort();  // two framings
    }
    if (req[bhttp::field::content_length].find(',') != std::string_view::npos) std::abort();
    while (next < sent.size() && sent[next] != req.body()) ++next;
    if (next == sent.size()) std::abort();  // a body the client never sent, or out of order
    ++next;
    rest.remove_prefix(p.used);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // One idle upstream connection at most: each input's requests go over fresh ones.
  static World world(
      "timeout: 2s, max_response_size: 4KiB, max_idle_connections: 1",
      "store: {memory: {}}\n"
      "server: {header_timeout: 2s, read_timeout: 2s, idle_timeout: 2s, body_timeout: 2s,"
      " max_header_size: 4KiB, http2: false}\n"  // HTTP/1.1 only: the property is its framing
      "defaults: {max_body: 8KiB}\n"
      "routes:\n"
      "  - {name: orders, path_prefix: /v1/orders}\n",
      upstream_connection);
  received.clear();
  const std::string_view input{reinterpret_cast<const char*>(data), size};
  world.run(input, 0x7f020000u);  // 127.2.0.0/16
  check_forwarded(input);
  return 0;
}
