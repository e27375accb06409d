#pragma once
// A SpanSink that keeps what it is offered, for tests of spans without an exporter.
#include <memory>
#include <vector>

#include "idemproxy/trace/span.hpp"

namespace idemproxy::trace::testing {

class FakeSink final : public SpanSink {
 public:
  void offer(std::unique_ptr<SpanData> span) noexcept override { spans.push_back(std::move(span)); }
  std::vector<std::unique_ptr<SpanData>> spans;
};

}  // namespace idemproxy::trace::testing
