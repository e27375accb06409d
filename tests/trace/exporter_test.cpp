// The queue and the batch exporter against a fake receiver (a Post function): bounds,
// drops and their counts, batching, retries, and shutdown's bound.
#include <gtest/gtest.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "idemproxy/trace/tracer.hpp"
#include "trace/otlp_exporter.hpp"

using namespace idemproxy;
using namespace idemproxy::trace;
using namespace std::chrono_literals;
using ops::SpanDrop;

namespace {

std::unique_ptr<SpanData> a_span() {
  auto s = std::make_unique<SpanData>();
  s->context = {random_trace_id(), random_span_id(), true};
  s->name = "POST /a";
  return s;
}

// Answers each export with the next of `answers` (the last repeats), keeping the bodies.
class FakeReceiver {
 public:
  explicit FakeReceiver(std::vector<PostResult> answers, Duration delay = 0ms)
      : answers_(std::move(answers)), delay_(delay) {}
  OtlpExporter::Post post() {
    return [this](const std::string& body, Duration, const std::function<bool()>& abandon) {
      const auto until = std::chrono::steady_clock::now() + delay_;
      while (std::chrono::steady_clock::now() < until && !abandon())
        std::this_thread::sleep_for(5ms);
      if (abandon()) return PostResult{0, "", {}, "abandoned"};  // as the HTTP client does
      std::lock_guard lock(mu_);
      bodies_.push_back(nlohmann::json::parse(body));
      const std::size_t i = std::min(bodies_.size() - 1, answers_.size() - 1);
      return answers_[i];
    };
  }
  std::vector<std::size_t> batch_sizes() {
    std::lock_guard lock(mu_);
    std::vector<std::size_t> sizes;
    for (const auto& b : bodies_) {
      sizes.push_back(b["resourceSpans"][0]["scopeSpans"][0]["spans"].size());
    }
    return sizes;
  }
  std::size_t attempts() {
    std::lock_guard lock(mu_);
    return bodies_.size();
  }

 private:
  std::mutex mu_;
  std::vector<PostResult> answers_;
  Duration delay_;
  std::vector<nlohmann::json> bodies_;
};

PostResult status(int code, std::string body = "{}") {
  return PostResult{code, std::move(body), {}, ""};
}

OtlpExporter::Options fast(std::size_t queue, std::size_t batch, Duration delay = 50ms) {
  OtlpExporter::Options o;
  o.max_queue = queue;
  o.max_batch = batch;
  o.batch_delay = delay;
  o.timeout = 1s;
  o.backoff_initial = 10ms;
  o.backoff_max = 40ms;
  return o;
}

template <class Done>
void wait_until(Done done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  ASSERT_TRUE(done());
}

}  // namespace

TEST(SpanQueue, AFullQueueDropsAndCountsWithoutWaiting) {
  ops::Metrics metrics;
  SpanQueue queue(3, 2, metrics);
  for (int i = 0; i < 5; ++i) queue.offer(a_span());
  EXPECT_EQ(queue.size(), 3U);
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::queue_full), 2U);
  std::vector<std::unique_ptr<SpanData>> out;
  queue.take(out, 2, std::chrono::steady_clock::now());
  EXPECT_EQ(out.size(), 2U);
  queue.offer(a_span());  // room again
  EXPECT_EQ(queue.size(), 2U);
  queue.close();
  queue.offer(a_span());
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::shutdown), 1U);
  EXPECT_EQ(queue.discard(SpanDrop::shutdown), 2U);
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::shutdown), 3U);
  EXPECT_NE(metrics.render().find("idemproxy_trace_spans_dropped_total{reason=\"queue_full\"} 2"),
            std::string::npos);
}

TEST(OtlpExporter, SendsFullBatchesAtOnceAndTheRestAfterTheDelay) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(200)});
  OtlpExporter exporter(fast(100, 4, 300ms), metrics, receiver.post());
  for (int i = 0; i < 9; ++i) exporter.queue().offer(a_span());
  wait_until([&] { return metrics.spans_exported() == 9; });
  EXPECT_EQ(receiver.batch_sizes(), (std::vector<std::size_t>{4, 4, 1}));
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::queue_full), 0U);
}

TEST(OtlpExporter, RetriesRetryableStatusesThenSucceeds) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(503), status(429), status(200)});
  OtlpExporter exporter(fast(100, 10), metrics, receiver.post());
  exporter.queue().offer(a_span());
  exporter.queue().offer(a_span());
  wait_until([&] { return metrics.spans_exported() == 2; });
  EXPECT_EQ(receiver.attempts(), 3U);
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::export_failed), 0U);
}

TEST(OtlpExporter, ANonRetryableStatusDropsTheBatchAfterOneAttempt) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(400), status(200)});
  OtlpExporter exporter(fast(100, 10), metrics, receiver.post());
  for (int i = 0; i < 3; ++i) exporter.queue().offer(a_span());
  wait_until([&] { return metrics.spans_dropped(SpanDrop::export_failed) == 3; });
  EXPECT_EQ(receiver.attempts(), 1U);
  EXPECT_EQ(metrics.spans_exported(), 0U);
}

TEST(OtlpExporter, RetriesEndAfterTheLastAttempt) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(502)});
  auto options = fast(100, 10);
  options.max_attempts = 3;
  OtlpExporter exporter(options, metrics, receiver.post());
  exporter.queue().offer(a_span());
  wait_until([&] { return metrics.spans_dropped(SpanDrop::export_failed) == 1; });
  EXPECT_EQ(receiver.attempts(), 3U);
}

TEST(OtlpExporter, SpansTheReceiverRejectsAreCountedAsDropped) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(200, R"({"partialSuccess":{"rejectedSpans":"2"}})")});
  OtlpExporter exporter(fast(100, 5), metrics, receiver.post());
  for (int i = 0; i < 5; ++i) exporter.queue().offer(a_span());
  wait_until([&] { return metrics.spans_exported() == 3; });
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::rejected), 2U);
}

// A receiver that takes 2 s per export: the producer's offers return at once, the
// queue holds what it can, and the rest is counted as dropped.
TEST(OtlpExporter, ASlowReceiverNeverSlowsTheProducer) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(200)}, 2s);
  OtlpExporter exporter(fast(100, 10, 10ms), metrics, receiver.post());
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 10000; ++i) exporter.queue().offer(a_span());
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 500ms);
  // The exporter holds at most one batch; the queue at most 100.
  EXPECT_GE(metrics.spans_dropped(SpanDrop::queue_full), 10000U - 100 - 10);
  exporter.shutdown(50ms);
}

TEST(OtlpExporter, ShutdownFlushesWhatIsQueued) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(200)});
  OtlpExporter exporter(fast(100, 50, 10s), metrics, receiver.post());
  for (int i = 0; i < 7; ++i) exporter.queue().offer(a_span());
  exporter.shutdown(2s);
  EXPECT_EQ(metrics.spans_exported(), 7U);
  exporter.queue().offer(a_span());  // after shutdown: dropped, counted
  EXPECT_EQ(metrics.spans_dropped(SpanDrop::shutdown), 1U);
}

// A receiver that never answers: shutdown still returns within its bound (plus one
// 20 ms check of the abandoned request), and counts what it could not send.
TEST(OtlpExporter, ShutdownIsBoundedWhenTheReceiverHangs) {
  ops::Metrics metrics;
  FakeReceiver receiver({status(200)}, 1h);
  OtlpExporter exporter(fast(100, 5, 10ms), metrics, receiver.post());
  for (int i = 0; i < 12; ++i) exporter.queue().offer(a_span());
  wait_until([&] { return exporter.queue().size() <= 7; });  // one batch is being sent
  const auto start = std::chrono::steady_clock::now();
  exporter.shutdown(300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 1s);
  EXPECT_EQ(metrics.spans_exported(), 0U);
  EXPECT_EQ(
      metrics.spans_dropped(SpanDrop::export_failed) + metrics.spans_dropped(SpanDrop::shutdown),
      12U);
}
