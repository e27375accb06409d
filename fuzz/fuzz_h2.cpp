// An HTTP/2 connection, as raw bytes from a client after the preface, fed through a
// real session: nghttp2's framing and HPACK, the per-stream limits, the bridge, and
// every stream through the phases to a live (in-process) upstream and back. The
// session runs on a loopback socket against the memory store; the client half-closes
// after the input, so streams with a whole request are answered and the others reset.
// Properties: no crash, no sanitizer report, no hang, and what the proxy writes back
// is whole HTTP/2 frames (RFC 9113 §4.1) starting with its SETTINGS (§3.4).
#include <cstdio>

#include "codec/http2/connection.hpp"
#include "session_harness.hpp"

using namespace idemproxy::fuzz;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static World world(
      "timeout: 2s, max_response_size: 4KiB",
      "store: {memory: {}}\n"
      "server: {header_timeout: 2s, read_timeout: 1s, idle_timeout: 2s, max_header_size: 4KiB,"
      " max_header_fields: 20}\n"
      "defaults: {max_body: 8KiB}\n"
      "routes:\n"
      "  - {name: orders, path_prefix: /v1/orders, key_required: true}\n"
      "  - {name: shadow, path_prefix: /v1/shadow, mode: shadow}\n",
      answer_created);
  std::string input(idemproxy::codec::http2::kPreface);
  input.append(reinterpret_cast<const char*>(data), size);
  const std::string out = world.run(input, 0x7f020000u);  // 127.2.0.0/16
  if (std::getenv("IDEMPROXY_FUZZ_PRINT")) std::fprintf(stderr, "%zu bytes out\n", out.size());
  if (!whole_h2_frames(out)) std::abort();
  return 0;
}
