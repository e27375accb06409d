#pragma once
// Event logs and the access log (one line per request), as text or JSON lines.
#include <string>

namespace idemproxy::ops {

/// What the access log records of one request. Never the raw key or the body.
struct AccessRecord {
  std::string request_id;
  std::string peer;
  std::string method;
  std::string target;
  std::string route;
  std::string outcome;
  unsigned status = 0;           // what the client got
  unsigned upstream_status = 0;  // 0 when the upstream was not called or did not answer
  std::string key_hash;          // first 16 hex digits of SHA-256(key), or empty
  double duration_ms = 0;
  double upstream_ms = 0;
};

/// level: trace..off; format: "text" or "json". Call once, before serving.
void configure_logging(const std::string& level, const std::string& format);
void log_access(const AccessRecord& record);

}  // namespace idemproxy::ops
