#include "proxy/pump.hpp"

#include "http/chunk.hpp"
#include "http/fields.hpp"

namespace idemproxy::proxy {
namespace {

Exchange::TimePoint from_now(Duration timeout) {
  return std::chrono::steady_clock::now() + timeout;
}

// Whether a repeat of a request with this method has the effect of one (RFC 9110 9.2.2).
bool harmless(bhttp::verb method) {
  using bhttp::verb;
  return method == verb::get || method == verb::head || method == verb::options ||
         method == verb::trace || method == verb::put || method == verb::delete_;
}

upstream::RequestFraming request_framing(const RequestHeader& head, const Exchange& from,
                                         bool te_trailers) {
  // A body declared empty and already read is none at all (HTTP/2: END_STREAM on the
  // HEADERS frame); frame_request framed the head to match.
  const bool body = from.has_body() && !(from.body_done() && from.content_length() == 0);
  return {body, te_trailers, !body && harmless(head.method())};
}

}  // namespace

asio::awaitable<beast::error_code> send_request_head(upstream::UpstreamCall& call,
                                                     RequestHeader& head, const ExtraFields& extra,
                                                     const Exchange& from, bool te_trailers,
                                                     Duration timeout) {
  const upstream::RequestFraming framing = request_framing(head, from, te_trailers);
  const auto head_by = from_now(timeout);
  co_return co_await call.send_head(head, extra, framing, head_by);
}

asio::awaitable<RelayError> send_request(upstream::UpstreamCall& call, RequestHeader& head,
                                         const ExtraFields& extra, Exchange& from, bool te_trailers,
                                         Duration timeout,
                                         std::optional<Exchange::TimePoint> deadline,
                                         BodyPiece::Error& read_error,
                                         beast::error_code& write_error, const bool* answer_over) {
  const upstream::RequestFraming framing = request_framing(head, from, te_trailers);
  const auto over = [answer_over] { return answer_over != nullptr && *answer_over; };
  // (No temporary of class type inside a co_await expression: GCC 12 miscompiles
  // some, http/exchange.cpp says which.)
  // A full-duplex request's head went before its answer was read (send_request_head).
  if (answer_over == nullptr) {
    const auto head_by = from_now(timeout);
    std::optional<beast::error_code> sent = call.send_head_now(head, extra, framing);
    if (!sent) sent = co_await call.send_head(head, extra, framing, head_by);
    if (*sent) {
      write_error = *sent;
      co_return RelayError::write;
    }
  }
  if (!framing.body) co_return RelayError::none;
  for (bool end = false; !end;) {
    std::string_view data;
    if (from.body_done()) {
      end = true;
    } else {
      std::optional<BodyPiece> piece = from.read_body_now(Chunk::kSize);
      if (!piece) piece = co_await from.read_body(Chunk::kSize, deadline);
      if (piece->error != BodyPiece::Error::none) {
        read_error = piece->error;
        co_return RelayError::read;
      }
      data = piece->data;
      end = piece->end;
    }
    if (over()) break;  // the answer ended while this piece came
    std::optional<beast::error_code> wrote = call.send_body_now(data, end);
    if (!wrote) {
      const auto by = from_now(timeout);
      wrote = co_await call.send_body(data, end, by);
    }
    if (*wrote) {
      write_error = *wrote;
      co_return RelayError::write;
    }
    // The upstream answered before it took the whole body: the answer tells the rest.
    if (call.answered_early() || over()) break;
  }
  co_return RelayError::none;
}

asio::awaitable<beast::error_code> read_final_head(upstream::UpstreamCall& call,
                                                   Exchange* interim_to, bool head_request,
                                                   std::optional<std::uint64_t> body_limit,
                                                   FieldsAllocator fields,
                                                   Exchange::TimePoint until) {
  for (;;) {
    if (auto ec = co_await call.read_head(head_request, body_limit, fields, until)) co_return ec;
    // Beast and nghttp2 read any three digits; 000 to 099 have no class (RFC 9110 15),
    // and a client refuses them (curl, Python's http.client): from either protocol.
    if (call.head().result_int() < 100) co_return bhttp::error::bad_status;
    if (!call.interim()) co_return beast::error_code{};
    if (interim_to == nullptr) continue;
    auto& head = call.head();
    strip_hop_by_hop(head);
    // A client that cannot take the 1xx will fail the final answer's write too.
    co_await interim_to->send_interim(head);
  }
}

asio::awaitable<RelayError> relay_answer(upstream::UpstreamCall& call, Exchange& to,
                                         std::string_view prefix, bool expect_trailers,
                                         Duration timeout, beast::error_code& read_error) {
  ResponseHeader& head = call.head();
  Framing framing = call.framing();
  if (framing.kind == Framing::Kind::none) {
    // Nothing to relay but the head: the connection is free for the next call first.
    const auto by = from_now(timeout);
    co_await call.read_body(by);
    const bool sent = co_await to.send_head(head, framing);
    co_return sent ? RelayError::none : RelayError::write;
  }
  // A client takes trailers only as its codec allows (HTTP/1.1: chunked, with TE).
  framing.trailers = framing.trailers || expect_trailers;
  std::optional<bool> head_sent = to.send_head_now(head, framing);
  if (!head_sent) head_sent = co_await to.send_head(head, framing);
  if (!*head_sent) co_return RelayError::write;
  if (!prefix.empty()) {
    const Trailers none;
    if (!co_await to.send_body(prefix, false, none)) co_return RelayError::write;
  }
  for (;;) {
    const auto by = from_now(timeout);
    const upstream::AnswerPiece piece = co_await call.read_body(by);
    if (piece.error) {
      read_error = piece.error;
      co_return RelayError::read;
    }
    // Once the last piece is read the upstream connection is free, before the
    // client has the last bytes.
    std::optional<bool> sent = to.send_body_now(piece.data, piece.end, piece.trailers);
    if (!sent) sent = co_await to.send_body(piece.data, piece.end, piece.trailers);
    if (!*sent) co_return RelayError::write;
    if (piece.end) co_return RelayError::none;
  }
}

}  // namespace idemproxy::proxy
