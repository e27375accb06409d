#pragma once
// What an HTTP/1.1 upstream sent while its request was still being written. A server
// may answer before it read the whole request (RFC 9112 9.6), and keep the connection
// open with the rest unread: the proxy's write then waits for room that never comes,
// while the answer waits in the socket. Interim answers (RFC 9110 15.2) are not that
// answer: the server still wants the body.
#include <string_view>

namespace idemproxy::codec::http1 {

/// Whether `bytes`, the start of what the upstream sent, begin a final answer past any
/// whole interim ones: a status line of another class, or bytes that are no status
/// line at all (the read will say they are malformed). False while they are empty,
/// interim answers only, or could still become one.
constexpr bool final_answer_begins(std::string_view bytes) {
  constexpr std::string_view kInterim = "HTTP/1.x 1";  // 'x': any digit
  const auto matches = [&](std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) {
      const char want = kInterim[i];
      const bool digit = bytes[i] >= '0' && bytes[i] <= '9';
      if (want == 'x' ? !digit : bytes[i] != want) return false;
    }
    return true;
  };
  for (;;) {
    if (bytes.size() < kInterim.size()) return !matches(bytes.size());
    if (!matches(kInterim.size())) return true;
    const auto end = bytes.find("\r\n\r\n");
    if (end == std::string_view::npos) return false;  // an interim head, still coming
    bytes.remove_prefix(end + 4);
  }
}

}  // namespace idemproxy::codec::http1
