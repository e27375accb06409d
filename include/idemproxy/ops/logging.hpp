#pragma once
// Event logs and the access log (one line per request), as text or JSON lines.
#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace idemproxy::ops {

/// What the access log records of one request. Never the raw key or the body. Views of
/// the request's own fields, valid for the log_access call (which formats the line
/// before it returns): copying them took eight heap blocks per logged request.
struct AccessRecord {
  std::string_view request_id;
  std::string_view trace_id;  // W3C traceparent's trace id: the client's, or one started here
  std::string_view original_trace_id;  // for a replay: the trace id of the request that executed
  std::string_view peer;
  std::string_view method;
  std::string_view target;
  std::string_view route;
  std::string_view outcome;
  unsigned status = 0;           // what the client got
  unsigned upstream_status = 0;  // 0 when the upstream was not called or did not answer
  std::string_view key_hash;     // first 16 hex digits of SHA-256(key), or empty
  double duration_ms = 0;
  double upstream_ms = 0;
};

/// level: trace..off; format: "text" or "json". Called before serving, and again by a
/// reload.
/// Every line, startup, event or access, is `TIME LEVEL MESSAGE [key=value ...]` in
/// text, or one JSON object with ts, level and msg; levels are named as the config
/// names them (trace, debug, info, warn, error, critical).
void configure_logging(const std::string& level, const std::string& format);
void log_access(const AccessRecord& record);
/// Access lines are gathered in a buffer of `buffer_bytes`, in the order they end, and
/// written when the next would not fit, every `flush`, by flush_access_log and at exit;
/// 0 bytes writes each line as it ends (the default before this is called). Event lines
/// are never held, so an access line may follow an event line logged after it. Call it
/// before serving (serve does, from log.access_buffer and log.access_flush).
void configure_access_log(std::size_t buffer_bytes, std::chrono::milliseconds flush);
/// Writes the access lines held; serve calls it on its way out.
void flush_access_log();
/// Whether log_access writes anything: callers skip building a record when it does
/// not.
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
