#pragma once
// The batch exporter: a thread of its own takes spans from the bounded queue in
// batches (max_batch spans, or whatever waited batch_delay) and POSTs each batch,
// retrying what OTLP/HTTP calls retryable with exponential backoff. The I/O threads
// only ever offer to the queue: a slow, down or failing receiver fills the queue,
// and what no longer fits is dropped and counted, never waited for.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "trace/otlp_http.hpp"
#include "trace/otlp_json.hpp"
#include "trace/span_queue.hpp"

namespace idemproxy::trace {

class OtlpExporter {
 public:
  using Clock = std::chrono::steady_clock;
  /// Sends one export body within `timeout`; gives up early once `abandon()` is true.
  using Post = std::function<PostResult(const std::string& body, Duration timeout,
                                        const std::function<bool()>& abandon)>;

  struct Options {
    std::size_t max_queue = 2048;
    std::size_t max_batch = 512;
    Duration batch_delay = std::chrono::seconds{5};
    Duration timeout = std::chrono::seconds{10};
    // The OpenTelemetry SDKs' defaults: 5 attempts, 1 s doubling to at most 5 s, jittered.
    int max_attempts = 5;
    Duration backoff_initial = std::chrono::seconds{1};
    Duration backoff_max = std::chrono::seconds{5};
    Duration retry_after_max = std::chrono::seconds{30};  // a receiver's Retry-After, capped
    Resource resource;
  };
  static Options options_from(const config::TracingConfig& config, std::string version);

  /// Starts the export thread.
  OtlpExporter(Options options, ops::Metrics& metrics, Post post);
  /// Exports over HTTP to config.otlp_endpoint.
  OtlpExporter(const config::TracingConfig& config, ops::Metrics& metrics,
               const std::string& version);
  ~OtlpExporter() { shutdown(std::chrono::seconds{5}); }
  OtlpExporter(const OtlpExporter&) = delete;
  OtlpExporter& operator=(const OtlpExporter&) = delete;

  /// Where spans are offered.
  SpanQueue& queue() { return queue_; }
  /// Stops taking spans, exports what is queued for at most `bound`, counts the rest
  /// as dropped, and joins the thread. Later calls do nothing.
  void shutdown(Duration bound);

 private:
  void run();
  void send(std::vector<std::unique_ptr<SpanData>>& batch);
  bool pause(Duration delay);  // false when shutdown began
  bool past_stop_deadline() const;
  void warn(const std::string& what);

  const Options options_;
  ops::Metrics& metrics_;
  const Post post_;
  SpanQueue queue_;
  std::mutex mu_;  // guards stopping_ and joined_, for pause() and shutdown()
  std::condition_variable stop_;
  bool stopping_ = false;
  bool joined_ = false;
  std::atomic<Clock::rep> stop_deadline_{Clock::time_point::max().time_since_epoch().count()};
  Clock::time_point last_warning_{};
  std::thread thread_;  // last: it starts once everything above is built
};

}  // namespace idemproxy::trace
