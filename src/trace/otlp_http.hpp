#pragma once
// One OTLP/HTTP export request: a POST of the JSON body to tracing.otlp_endpoint,
// over http:// or https:// (verified against the system trust store, which
// SSL_CERT_FILE can replace), on the exporter's thread. Blocking, and bounded as a
// whole (resolve, connect, handshake, write, read) by the timeout given.
#include <boost/asio/ssl/context.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "idemproxy/config/config.hpp"

namespace idemproxy::trace {

struct PostResult {
  int status = 0;  // 0: no answer (refused, reset, timed out)
  std::string body;
  std::optional<std::chrono::seconds> retry_after;  // Retry-After in delay-seconds form
  std::string error;                                // why there was no answer
};

class OtlpHttpClient {
 public:
  /// `user_agent` names the exporter (OTLP spec: exporters SHOULD send one).
  OtlpHttpClient(config::TracingConfig target, std::string user_agent);
  /// Gives up at `timeout`, or as soon as `abandon()` is true (checked every 20 ms).
  PostResult post(const std::string& body, Duration timeout, const std::function<bool()>& abandon);

 private:
  const config::TracingConfig target_;
  const std::string user_agent_;
  const std::string host_field_;                    // Host: the authority as the URL gave it
  std::unique_ptr<boost::asio::ssl::context> tls_;  // for https:// only
};

/// OTLP/HTTP "Retryable Response Codes": 429, 502, 503 and 504 (and no answer at all).
bool retryable(int status);

}  // namespace idemproxy::trace
