// The recording half of Span; the header holds the checks that make a span that does
// not record cost nothing.
#include "idemproxy/trace/span.hpp"

#include <chrono>

#include "idemproxy/trace/tracer.hpp"

namespace idemproxy::trace {

std::uint64_t unix_nanos_now() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    context_ = other.context_;
    data_ = std::move(other.data_);
    sink_ = other.sink_;
  }
  return *this;
}

void Span::set(std::string_view key, AttributeValue value) {
  for (auto& a : data_->attributes) {
    if (a.key == key) {  // a later value replaces the earlier, as the OTel API does
      a.value = std::move(value);
      return;
    }
  }
  data_->attributes.push_back({std::string(key), std::move(value)});
}

void Span::record_http_status(int status) {
  set(kHttpResponseStatusCode, std::int64_t{status});
  // HTTP semantic conventions, "Status": a server span is an error for 5xx only (a 4xx
  // is the client's error); a client span for any 4xx or 5xx. error.type is the code.
  const bool failed = status >= 500 || (data_->kind == SpanKind::client && status >= 400);
  if (failed) {
    data_->status = StatusCode::error;
    set(kErrorType, std::to_string(status));
  }
}

void Span::record_error(std::string_view message) {
  data_->status = StatusCode::error;
  data_->status_message = std::string(message);
}

Span Span::start_child(std::string_view name, SpanKind kind) const {
  SpanContext child{context_.trace_id, random_span_id(), context_.sampled};
  if (!data_) return Span{child};
  auto data = std::make_unique<SpanData>();
  data->context = child;
  data->parent_span_id = context_.span_id;
  data->name = std::string(name);
  data->kind = kind;
  data->start_unix_nanos = unix_nanos_now();
  return Span{std::move(data), *sink_};
}

void Span::finish() {
  data_->end_unix_nanos = unix_nanos_now();
  sink_->offer(std::move(data_));  // leaves data_ empty: the span no longer records
}

}  // namespace idemproxy::trace
