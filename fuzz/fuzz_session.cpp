// A whole request, as raw bytes from a client, fed through a real session: the
// proxy's HTTP parsing, framing checks, routing, key handling, body reading, claim,
// forwarding to a live (in-process) upstream, and the answer. The session runs on
// a loopback socket against the memory store.
// Properties: no crash, no sanitizer report, no hang (the session ends once the
// client has sent everything), and what the proxy writes back is HTTP: empty, or a
// response head that parses, with a status from 100 to 599 (HTTP/2 frames, starting
// with SETTINGS, after the HTTP/2 preface).
#include <cstdio>

#include "codec/http2/connection.hpp"
#include "session_harness.hpp"

using namespace idemproxy::fuzz;

namespace {

bool looks_like_http(const std::string& out) {
  if (out.empty()) return true;
  ResponseParser<bhttp::empty_body> head;
  head.skip(true);  // only the head is checked: a HEAD answer has no body
  beast::error_code ec;
  head.put(asio::buffer(out), ec);
  if (ec || !head.is_header_done()) return false;
  const unsigned status = head.get().result_int();
  return status >= 100 && status <= 599;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world(
      "timeout: 2s, max_response_size: 4KiB",
      "store: {memory: {}}\n"
      "scope_key: fuzzing-scope-key-0123456789abcdef\n"
      "server: {header_timeout: 2s, read_timeout: 2s, idle_timeout: 2s, max_header_size: 4KiB}\n"
      "defaults: {max_body: 8KiB}\n"
      "routes:\n"
      "  - {name: orders, path_prefix: /v1/orders, key_required: true}\n"
      "  - {name: pay, path_prefix: /v1/pay, scope: {from: authorization}, on_concurrent: wait,"
      " lease: 1s}\n"
      "  - {name: shadow, path_prefix: /v1/shadow, mode: shadow}\n",
      answer_created);
  const std::string out =
      world.run({reinterpret_cast<const char*>(data), size}, 0x7f010000u);  // 127.1.0.0/16
  if (std::getenv("IDEMPROXY_FUZZ_PRINT")) std::fprintf(stderr, "%s\n---\n", out.c_str());
  // server.http2 is on: an input that opens with the HTTP/2 preface is served as
  // HTTP/2; any other is HTTP/1.1, including one that starts like the preface and
  // departs from it.
  const std::string_view input{reinterpret_cast<const char*>(data), size};
  if (input.starts_with(idemproxy::codec::http2::kPreface)) {
    if (!whole_h2_frames(out)) std::abort();
    return 0;
  }
  if (!looks_like_http(out)) std::abort();
  return 0;
}
