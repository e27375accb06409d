#pragma once
// A full-duplex exchange: the request is sent in a coroutine of its own while the
// caller reads the answer and relays it. Both run on the client's executor. It is
// what a bidirectional gRPC call needs (each side answers what the other sent, so
// neither can wait for the other's end), and what an upload needs that its upstream
// answers while it goes on. Only an HTTP/2 client stream and an HTTP/2 upstream
// stream have the two directions apart (Exchange::full_duplex,
// UpstreamCall::full_duplex); nghttpx relays them so too.
#include <chrono>
#include <optional>

#include "http/exchange.hpp"
#include "http/signal.hpp"
#include "proxy/pump.hpp"
#include "upstream/call.hpp"

namespace idemproxy::proxy {

class RequestSide {
 public:
  using TimePoint = Exchange::TimePoint;

  /// How the request's side ended: on its own, before the answer was over (a request
  /// finish() stopped reports nothing).
  struct Outcome {
    RelayError sent = RelayError::none;  // send_request's, with its two causes
    BodyPiece::Error read_error = BodyPiece::Error::none;
    beast::error_code write_error;
    /// The request went whole and no final head came within `timeout` after it
    /// (upstream.timeout bounds the wait for the head from the request's end, as it
    /// does when the request is sent first).
    bool head_late = false;
  };

  /// send_request's arguments, which must outlive finish(). The head went already
  /// (send_request_head).
  RequestSide(const asio::any_io_executor& ex, upstream::UpstreamCall& call, RequestHeader& head,
              const ExtraFields& extra, Exchange& from, bool te_trailers, Duration timeout,
              std::optional<TimePoint> deadline);
  RequestSide(const RequestSide&) = delete;
  RequestSide& operator=(const RequestSide&) = delete;
  ~RequestSide() = default;

  /// Starts sending. finish() must be awaited before this object goes.
  void start();
  /// The answer's final head was read, or its read ended: the head's wait is over.
  void head_read();
  /// The answer is over (relayed, or failed): what is left of the request is not sent
  /// (the client's body is dropped; the upstream stream, still going, is
  /// interrupted), and this returns once the request's coroutine has ended.
  asio::awaitable<Outcome> finish();

 private:
  asio::awaitable<void> run();

  asio::any_io_executor ex_;
  upstream::UpstreamCall& call_;
  RequestHeader& head_;
  const ExtraFields& extra_;
  Exchange& from_;
  bool te_trailers_;
  Duration timeout_;
  std::optional<TimePoint> deadline_;
  Outcome out_;
  bool answer_over_ = false;
  bool head_came_ = false;
  bool done_ = false;
  http::Signal head_signal_;
  http::Signal done_signal_;
};

}  // namespace idemproxy::proxy
