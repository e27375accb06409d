#include "http/exchange.hpp"

#include "http/chunk.hpp"

namespace idemproxy::http {

asio::awaitable<BodyPiece::Error> Exchange::read_whole_body(std::string& body,
                                                            std::optional<TimePoint> deadline) {
  body.clear();
  // A declared length is taken at its word only up to a chunk: a client cannot make
  // the proxy reserve memory by announcing a body it never sends.
  if (const auto n = content_length()) body.reserve(std::min<std::uint64_t>(*n, Chunk::kSize));
  for (;;) {
    const BodyPiece piece = co_await read_body(Chunk::kSize, deadline);
    if (piece.error != BodyPiece::Error::none) co_return piece.error;
    body.append(piece.data);
    if (piece.end) co_return BodyPiece::Error::none;
  }
}

asio::awaitable<bool> Exchange::send(ResponseHeader& head, std::string_view body,
                                     Trailers trailers) {
  // No temporary of class type inside a co_await expression, however trivial: GCC 12
  // miscompiles `if (!co_await f(T{}))` followed by `co_return co_await g()` (the
  // coroutine is resumed at a bad point; reproduced in a 40-line program).
  const Framing framing = Framing::of(body.size(), !trailers.empty());
  std::optional<bool> head_sent = send_head_now(head, framing);
  if (!head_sent) head_sent = co_await send_head(head, framing);
  if (!*head_sent) co_return false;
  std::optional<bool> sent = send_body_now(body, true, trailers);
  if (!sent) sent = co_await send_body(body, true, trailers);
  co_return *sent;
}

}  // namespace idemproxy::http
