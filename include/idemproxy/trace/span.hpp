#pragma once
// A span: one timed operation of a request, with attributes, links and a status.
// A Span is a handle. When the tracer is off, or the trace is not sampled, the handle
// holds no data, and every call on it returns at once: no allocation, no lock.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "idemproxy/trace/span_context.hpp"

namespace idemproxy::trace {

/// OTLP's SpanKind values (opentelemetry/proto/trace/v1/trace.proto).
enum class SpanKind : std::uint8_t { internal = 1, server = 2, client = 3 };
/// OTLP's Status.StatusCode values.
enum class StatusCode : std::uint8_t { unset = 0, ok = 1, error = 2 };

using AttributeValue = std::variant<std::string, std::int64_t, bool, double>;
struct Attribute {
  std::string key;
  AttributeValue value;
};

/// A recorded span, as the exporter encodes it.
struct SpanData {
  SpanContext context;
  SpanId parent_span_id{};  // all zero: a root span
  std::string name;
  SpanKind kind = SpanKind::internal;
  std::uint64_t start_unix_nanos = 0;
  std::uint64_t end_unix_nanos = 0;
  std::vector<Attribute> attributes;
  std::vector<SpanContext> links;
  StatusCode status = StatusCode::unset;
  std::string status_message;  // with StatusCode::error only
};

/// Where ended spans go: the exporter's queue, or a test's fake. offer() is called on
/// I/O threads and must never block.
class SpanSink {
 public:
  virtual ~SpanSink() = default;
  virtual void offer(std::unique_ptr<SpanData> span) noexcept = 0;
};

/// The current time in nanoseconds since the Unix epoch, as OTLP's span times are.
std::uint64_t unix_nanos_now();

class Span {
 public:
  /// The null span: records nothing; its context is not valid().
  Span() = default;
  /// A span that is not recorded (its trace is not sampled), with ids to propagate.
  explicit Span(const SpanContext& context) : context_(context) {}
  /// A recorded span; `sink` gets it when it ends and must outlive it.
  Span(std::unique_ptr<SpanData> data, SpanSink& sink)
      : context_(data->context), data_(std::move(data)), sink_(&sink) {}
  Span(Span&& other) noexcept = default;
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { end(); }

  /// True while it records (sampled and not ended).
  bool recording() const { return data_ != nullptr; }
  /// Its ids, readable until it is destroyed (after end() too).
  const SpanContext& context() const { return context_; }

  // Each call on a span that does not record returns at once.
  void set_string(std::string_view key, std::string_view value) {
    if (data_) set(key, std::string(value));
  }
  void set_int(std::string_view key, std::int64_t value) {
    if (data_) set(key, value);
  }
  void set_bool(std::string_view key, bool value) {
    if (data_) set(key, value);
  }
  void set_double(std::string_view key, double value) {
    if (data_) set(key, value);
  }
  /// Renames it: a request's span is named by its route once the request is routed.
  void set_name(std::string_view name) {
    if (data_) data_->name.assign(name);
  }
  /// A link to another span, e.g. a replay's to the span of the request that executed.
  void add_link(const SpanContext& other) {
    if (data_) data_->links.push_back(other);
  }
  /// http.response.status_code, and the status the HTTP semantic conventions give it:
  /// an error for 5xx on a server span, for 4xx and 5xx on a client span.
  void set_http_status(int status) {
    if (data_) record_http_status(status);
  }
  /// Marks the span failed, e.g. the upstream was unreachable (error.type's text).
  void set_error(std::string_view message) {
    if (data_) record_error(message);
  }
  /// A span within this one, in the same trace: recorded when this one is; not
  /// recorded, with ids of its own, when this one is valid but not sampled; the null
  /// span under the null span.
  Span child(std::string_view name, SpanKind kind = SpanKind::internal) const {
    if (!context_.valid()) return Span{};
    return start_child(name, kind);
  }
  /// Stamps the end time and hands the span to its sink; later calls do nothing.
  void end() {
    if (data_) finish();
  }

 private:
  void set(std::string_view key, AttributeValue value);
  void record_http_status(int status);
  void record_error(std::string_view message);
  Span start_child(std::string_view name, SpanKind kind) const;
  void finish();

  SpanContext context_;
  std::unique_ptr<SpanData> data_;  // only while a sampled span records
  SpanSink* sink_ = nullptr;
};

}  // namespace idemproxy::trace
