#include "proxy/buffered.hpp"

#include "proxy/pump.hpp"

namespace idemproxy::http {
namespace {

ProxyError upstream_error(ProblemKind kind, std::string detail) {
  return ProxyError{kind, std::move(detail), std::nullopt, std::nullopt};
}

}  // namespace

asio::awaitable<UpstreamAnswer> round_trip(Upstream& upstream, StringRequest& request,
                                           bool te_trailers, Exchange* interim_to, Duration timeout,
                                           std::uint64_t max_answer) {
  UpstreamAnswer out;
  const auto until = std::chrono::steady_clock::now() + timeout;  // bounds the whole exchange
  const FieldsAllocator heap;
  auto [oec, call] = co_await upstream.open_call(heap);
  if (oec) {
    out.error = upstream_error(ProblemKind::upstream_unreachable,
                               "cannot connect to the upstream: " + oec.message());
    co_return out;
  }
  const std::string_view body = request.body();
  const RequestFraming framing{!body.empty(), te_trailers};
  auto wec = co_await call->send_head(request.base(), framing, until);
  if (!wec && framing.body) wec = co_await call->send_body(body, true, until);
  if (wec) {
    out.error = upstream_error(ProblemKind::upstream_unreachable,
                               "the request could not be sent to the upstream: " + wec.message());
    co_return out;
  }
  out.sent = true;
  const bool head_request = request.method() == bhttp::verb::head;
  // The body is bounded below; an oversized one is streamed.
  const std::optional<std::uint64_t> unbounded;
  auto rec = co_await read_final_head(*call, interim_to, head_request, unbounded, heap, until);
  std::string answer;
  if (!rec) {
    const Framing framing_in = call->framing();
    bool end = framing_in.kind == Framing::Kind::length && framing_in.length > max_answer;
    if (end) {
      out.oversized = UpstreamAnswer::Oversized{std::move(call), std::move(answer)};
      co_return out;
    }
    while (!end) {
      const AnswerPiece piece = co_await call->read_body(until);
      if (piece.error) {
        rec = piece.error;
        break;
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
  }
  if (rec == beast::error::timeout) {
    out.error =
        upstream_error(ProblemKind::upstream_timeout, "the upstream did not answer in time");
  } else if (rec) {
    out.sent = call->maybe_processed();
    out.error = out.sent ? upstream_error(
                               ProblemKind::upstream_failed,
                               "the upstream failed after the request was sent: " + rec.message())
                         : upstream_error(ProblemKind::upstream_unreachable,
                                          "the upstream refused the request unprocessed");
  }
  if (out.error) co_return out;
  out.response = StringResponse(std::move(call->head()), std::move(answer));
  co_return out;
}

}  // namespace idemproxy::http
