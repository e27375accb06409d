#pragma once
// The bounded queue between the I/O threads, which end spans, and the exporter
// thread, which sends them. offer() never waits for the exporter: it takes a lock
// held only for a pointer move, and a full queue drops the span and counts it.
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/trace/span.hpp"

namespace idemproxy::trace {

class SpanQueue final : public SpanSink {
 public:
  using Clock = std::chrono::steady_clock;
  /// `wake_at`: how many waiting spans wake the exporter before its deadline (a batch).
  SpanQueue(std::size_t capacity, std::size_t wake_at, ops::Metrics& metrics);

  /// Queues the span, or drops and counts it when the queue is full or closed.
  void offer(std::unique_ptr<SpanData> span) noexcept override;
  /// Waits until `wake_at` spans wait, `deadline` passes or the queue closes, then
  /// moves up to `most` of the oldest into `out`.
  void take(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most,
            Clock::time_point deadline);
  /// Moves up to `most` waiting spans into `out` without waiting.
  void take_now(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most);
  /// Later offers are dropped (and counted as dropped at shutdown); take returns at once.
  void close();
  /// Drops every waiting span, counted as `reason`; returns how many.
  std::size_t discard(ops::SpanDrop reason);
  std::size_t size() const;

 private:
  void move_out(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most);

  const std::size_t wake_at_;
  ops::Metrics& metrics_;
  mutable std::mutex mu_;
  std::condition_variable ready_;
  std::vector<std::unique_ptr<SpanData>> ring_;  // fixed size: offer never allocates
  std::size_t head_ = 0;
  std::size_t count_ = 0;
  bool closed_ = false;
};

}  // namespace idemproxy::trace
