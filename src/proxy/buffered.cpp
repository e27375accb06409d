#include "proxy/buffered.hpp"

#include "proxy/pump.hpp"

namespace idemproxy::proxy {
namespace {

ProxyError upstream_error(ProblemKind kind, std::string detail) {
  return ProxyError{kind, std::move(detail), std::nullopt, std::nullopt};
}

}  // namespace

ProxyError failed_after_sending(const upstream::UpstreamCall& call, const beast::error_code& ec) {
  if (ec == beast::error::timeout) {
    return upstream_error(ProblemKind::upstream_timeout, "the upstream did not answer in time");
  }
  return call.maybe_processed()
             ? upstream_error(ProblemKind::upstream_failed,
                              "the upstream failed after the request was sent: " + ec.message())
             : upstream_error(ProblemKind::upstream_unreachable,
                              "the upstream refused the request unprocessed");
}

asio::awaitable<UpstreamHead> start_exchange(upstream::Upstream& upstream, StringRequest& request,
                                             const ExtraFields& extra, bool te_trailers,
                                             Exchange* interim_to, Exchange::TimePoint until) {
  UpstreamHead out;
  const FieldsAllocator heap;
  upstream::UpstreamCallPtr call = upstream.open_call_now(heap);
  beast::error_code oec;
  if (!call) std::tie(oec, call) = co_await upstream.open_call(heap);
  if (oec) {
    out.error = upstream_error(ProblemKind::upstream_unreachable,
                               "cannot connect to the upstream: " + oec.message());
    co_return out;
  }
  const std::string_view body = request.body();
  const upstream::RequestFraming framing{!body.empty(), te_trailers};
  std::optional<beast::error_code> held = call->send_head_now(request.base(), extra, framing);
  if (!held) held = co_await call->send_head(request.base(), extra, framing, until);
  beast::error_code wec = *held;
  if (!wec && framing.body) {
    std::optional<beast::error_code> wrote = call->send_body_now(body, true);
    if (!wrote) wrote = co_await call->send_body(body, true, until);
    wec = *wrote;
  }
  if (wec && call->reached_upstream()) {
    // Some of it went: the upstream may have acted on what it read.
    out.error = wec == beast::error::timeout
                    ? upstream_error(ProblemKind::upstream_timeout,
                                     "the upstream took part of the request, then no more in time")
                    : upstream_error(ProblemKind::upstream_failed,
                                     "sending the request to the upstream failed after part of it "
                                     "went: " +
                                         wec.message());
    out.sent = true;
    co_return out;
  }
  if (wec) {
    out.error = upstream_error(ProblemKind::upstream_unreachable,
                               "the request could not be sent to the upstream: " + wec.message());
    co_return out;
  }
  out.sent = true;
  const bool head_request = request.method() == bhttp::verb::head;
  // The body is the caller's to bound.
  const std::optional<std::uint64_t> unbounded;
  const auto rec =
      co_await read_final_head(*call, interim_to, head_request, unbounded, heap, until);
  if (rec) {
    out.error = failed_after_sending(*call, rec);
    out.sent = call->maybe_processed();
    co_return out;
  }
  out.call = std::move(call);
  co_return out;
}

asio::awaitable<UpstreamAnswer> round_trip(upstream::Upstream& upstream, StringRequest& request,
                                           const ExtraFields& extra, bool te_trailers,
                                           Exchange* interim_to, Duration timeout,
                                           std::uint64_t max_answer) {
  UpstreamAnswer out;
  const auto until = std::chrono::steady_clock::now() + timeout;  // bounds the whole exchange
  UpstreamHead started =
      co_await start_exchange(upstream, request, extra, te_trailers, interim_to, until);
  out.sent = started.sent;
  if (started.error) {
    out.error = std::move(started.error);
    co_return out;
  }
  upstream::UpstreamCallPtr call = std::move(started.call);
  const Framing framing = call->framing();
  if (framing.kind == Framing::Kind::length && framing.length > max_answer) {
    out.oversized = UpstreamAnswer::Oversized{std::move(call), std::string()};
    co_return out;
  }
  std::string answer;
  for (bool end = false; !end;) {
    const upstream::AnswerPiece piece = co_await call->read_body(until);
    if (piece.error) {
      out.error = failed_after_sending(*call, piece.error);
      co_return out;
    }
    answer.append(piece.data);
    end = piece.end;
    if (end) out.trailers.assign(piece.trailers.begin(), piece.trailers.end());
    if (answer.size() > max_answer) {
      // Streamed on, never truncated (proxy/flow.cpp).
      out.oversized = UpstreamAnswer::Oversized{std::move(call), std::move(answer)};
      co_return out;
    }
  }
  out.response = StringResponse(std::move(call->head()), std::move(answer));
  co_return out;
}

}  // namespace idemproxy::proxy
