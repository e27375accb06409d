#pragma once
// An upstream answer read whole, for what the idempotent phases need whole (the
// record keeps status, fields, body and trailers): a helper on top of the pump.
#include <optional>
#include <string>
#include <vector>

#include "http/beast.hpp"
#include "http/exchange.hpp"
#include "http/problem.hpp"
#include "proxy/http_names.hpp"
#include "upstream/call.hpp"

namespace idemproxy::proxy {

/// A buffered upstream answer, or the error that prevented one, or (over
/// max_response_size) what is needed to stream the answer on.
struct UpstreamAnswer {
  std::optional<ProxyError> error;
  bool sent = false;  // whether the request may have reached the upstream
  StringResponse response;
  std::vector<Header> trailers;  // RFC 9110 6.5
  /// Set when the body outgrew max_response_size: `call` holds the head and the rest,
  /// `prefix` the body read so far. Never truncated: it is streamed.
  struct Oversized {
    upstream::UpstreamCallPtr call;
    std::string prefix;
  };
  std::optional<Oversized> oversized;
};

/// An exchange whose final head was read: its call, or the error that prevented it.
struct UpstreamHead {
  std::optional<ProxyError> error;
  bool sent = false;  // whether the request may have reached the upstream
  upstream::UpstreamCallPtr call;
};

/// Sends a whole request, with the fields the proxy added (`extra`), and reads the
/// answer's heads by `until`, interim ones to `interim_to` (null: dropped). The body
/// is left to the caller (call->read_body).
asio::awaitable<UpstreamHead> start_exchange(upstream::Upstream& upstream, StringRequest& request,
                                             const ExtraFields& extra, bool te_trailers,
                                             Exchange* interim_to, Exchange::TimePoint until);

/// What an upstream failure after the request was sent means: a timeout, a failure
/// that may have acted, or a refusal that did not (the call says which).
ProxyError failed_after_sending(const upstream::UpstreamCall& call, const beast::error_code& ec);

/// Sends a whole request with `extra` and reads the whole answer, by `timeout` in all; a body
/// larger than `max_answer` stops being read and comes back as `oversized`. Interim
/// answers go to `interim_to` (null: dropped). `te_trailers`: the client sent
/// `te: trailers`. A stale pooled connection that fails before the request is written
/// is retried once on a new one, as is an HTTP/2 stream the upstream refused
/// unprocessed (the calls do that); nothing is retried once the request may have
/// been processed.
asio::awaitable<UpstreamAnswer> round_trip(upstream::Upstream& upstream, StringRequest& request,
                                           const ExtraFields& extra, bool te_trailers,
                                           Exchange* interim_to, Duration timeout,
                                           std::uint64_t max_answer);

}  // namespace idemproxy::proxy
