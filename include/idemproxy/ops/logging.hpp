#pragma once
// Event logs and the access log (one line per request), as text or JSON lines.
#include <string>

namespace idemproxy::ops {

/// What the access log records of one request. Never the raw key or the body.
struct AccessRecord {
  std::string request_id;
  std::string trace_id;           // W3C traceparent's trace id: the client's, or one started here
  std::string original_trace_id;  // for a replay: the trace id of the request that executed
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
/// Every line, startup, event or access, is `TIME LEVEL MESSAGE [key=value ...]` in
/// text, or one JSON object with ts, level and msg; levels are named as the config
/// names them (trace, debug, info, warn, error, critical).
void configure_logging(const std::string& level, const std::string& format);
void log_access(const AccessRecord& record);
/// Whether log_access writes anything: callers skip building a record when it does
/// not (a record is eight strings copied per request).
bool access_log_enabled();

/// While alive, log lines written on this thread carry `trace_id`. Scope it to the
/// logging call itself: a coroutine may resume on another thread after co_await.
class TraceTag {
 public:
  explicit TraceTag(const std::string& trace_id);
  ~TraceTag();
  TraceTag(const TraceTag&) = delete;
  TraceTag& operator=(const TraceTag&) = delete;

 private:
  const std::string* previous_;
};

}  // namespace idemproxy::ops
