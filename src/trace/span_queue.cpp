#include "trace/span_queue.hpp"

#include <algorithm>

namespace idemproxy::trace {

SpanQueue::SpanQueue(std::size_t capacity, std::size_t wake_at, ops::Metrics& metrics)
    : wake_at_(std::max<std::size_t>(1, std::min(wake_at, capacity))),
      metrics_(metrics),
      ring_(std::max<std::size_t>(1, capacity)) {}

void SpanQueue::offer(std::unique_ptr<SpanData> span) noexcept {
  bool wake = false;
  auto reason = ops::SpanDrop::queue_full;
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      reason = ops::SpanDrop::shutdown;
    } else if (count_ < ring_.size()) {
      ring_[(head_ + count_) % ring_.size()] = std::move(span);
      ++count_;
      wake = count_ == wake_at_;  // once per batch, not on every span
    }
  }
  if (wake) ready_.notify_one();
  if (span) metrics_.count_spans_dropped(reason);  // and freed here, outside the lock
}

void SpanQueue::move_out(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most) {
  const std::size_t n = std::min(most, count_);
  for (std::size_t i = 0; i < n; ++i) {
    out.push_back(std::move(ring_[head_]));
    head_ = (head_ + 1) % ring_.size();
  }
  count_ -= n;
}

void SpanQueue::take(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most,
                     Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  ready_.wait_until(lock, deadline, [this] { return closed_ || count_ >= wake_at_; });
  move_out(out, most);
}

void SpanQueue::take_now(std::vector<std::unique_ptr<SpanData>>& out, std::size_t most) {
  std::lock_guard lock(mu_);
  move_out(out, most);
}

void SpanQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  ready_.notify_all();
}

std::size_t SpanQueue::discard(ops::SpanDrop reason) {
  std::vector<std::unique_ptr<SpanData>> dropped;
  {
    std::lock_guard lock(mu_);
    dropped.reserve(count_);
    move_out(dropped, count_);
  }
  metrics_.count_spans_dropped(reason, dropped.size());
  return dropped.size();
}

std::size_t SpanQueue::size() const {
  std::lock_guard lock(mu_);
  return count_;
}

}  // namespace idemproxy::trace
