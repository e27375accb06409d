#include "trace/otlp_exporter.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

namespace idemproxy::trace {
namespace {

constexpr auto kWarningEvery = std::chrono::seconds{30};  // a down receiver logs, not floods

}  // namespace

OtlpExporter::Options OtlpExporter::options_from(const config::TracingConfig& config,
                                                 std::string version) {
  Options o;
  o.max_queue = config.max_queue;
  o.max_batch = config.max_batch;
  o.batch_delay = config.batch_delay;
  o.timeout = config.timeout;
  o.resource.service_name = config.service_name;
  o.resource.scope_version = std::move(version);
  return o;
}

OtlpExporter::OtlpExporter(Options options, ops::Metrics& metrics, Post post)
    : options_(std::move(options)),
      metrics_(metrics),
      post_(std::move(post)),
      queue_(options_.max_queue, options_.max_batch, metrics),
      thread_([this] { run(); }) {}

OtlpExporter::OtlpExporter(const config::TracingConfig& config, ops::Metrics& metrics,
                           const std::string& version)
    : OtlpExporter(
          options_from(config, version), metrics,
          [client = std::make_shared<OtlpHttpClient>(config, "idemproxy/" + version)](
              const std::string& body, Duration timeout, const std::function<bool()>& abandon) {
            return client->post(body, timeout, abandon);
          }) {}

void OtlpExporter::shutdown(Duration bound) {
  {
    std::lock_guard lock(mu_);
    if (joined_) return;
    joined_ = true;
    stopping_ = true;
    stop_deadline_.store((Clock::now() + bound).time_since_epoch().count());
  }
  stop_.notify_all();
  queue_.close();
  thread_.join();
}

bool OtlpExporter::past_stop_deadline() const {
  return Clock::now().time_since_epoch().count() >= stop_deadline_.load();
}

bool OtlpExporter::pause(Duration delay) {
  std::unique_lock lock(mu_);
  return !stop_.wait_for(lock, delay, [this] { return stopping_; });
}

void OtlpExporter::run() {
  std::vector<std::unique_ptr<SpanData>> batch;
  batch.reserve(options_.max_batch);
  for (;;) {
    queue_.take(batch, options_.max_batch, Clock::now() + options_.batch_delay);
    {
      std::lock_guard lock(mu_);
      if (stopping_) break;
    }
    if (!batch.empty()) send(batch);
    batch.clear();
  }
  // Shutdown: flush what waits, batch by batch, until the bound runs out.
  while (!past_stop_deadline()) {
    if (batch.empty()) queue_.take_now(batch, options_.max_batch);
    if (batch.empty()) break;
    send(batch);
    batch.clear();
  }
  metrics_.count_spans_dropped(ops::SpanDrop::shutdown, batch.size());
  queue_.discard(ops::SpanDrop::shutdown);
}

void OtlpExporter::send(std::vector<std::unique_ptr<SpanData>>& batch) {
  const std::string body = encode_export(options_.resource, batch);
  const auto abandon = [this] { return past_stop_deadline(); };
  Duration delay = options_.backoff_initial;
  thread_local std::minstd_rand jitter{std::random_device{}()};
  PostResult last;
  for (int attempt = 1; attempt <= options_.max_attempts && !abandon(); ++attempt) {
    last = post_(body, options_.timeout, abandon);
    if (last.status >= 200 && last.status < 300) {
      const std::uint64_t rejected =
          std::min<std::uint64_t>(rejected_spans(last.body), batch.size());
      metrics_.count_spans_exported(batch.size() - rejected);
      if (rejected > 0) {
        metrics_.count_spans_dropped(ops::SpanDrop::rejected, rejected);
        warn("the receiver rejected " + std::to_string(rejected) + " of " +
             std::to_string(batch.size()) + " spans: " + last.body.substr(0, 200));
      }
      return;
    }
    if (!retryable(last.status) || attempt == options_.max_attempts) break;
    // Exponential backoff with jitter (half to all of the step), or the receiver's
    // Retry-After when it sent one (OTLP/HTTP "Failures").
    Duration wait =
        std::uniform_int_distribution<Duration::rep>(delay.count() / 2, delay.count())(jitter) *
        Duration{1};
    if (last.retry_after) {
      wait = std::min<Duration>(std::chrono::duration_cast<Duration>(*last.retry_after),
                                options_.retry_after_max);
    }
    delay = std::min(delay * 2, options_.backoff_max);
    if (!pause(wait)) break;  // shutting down: flush the rest rather than wait
  }
  metrics_.count_spans_dropped(ops::SpanDrop::export_failed, batch.size());
  warn("export of " + std::to_string(batch.size()) + " spans failed (" +
       (last.status != 0 ? "HTTP " + std::to_string(last.status)
                         : (last.error.empty() ? "not attempted" : last.error)) +
       "); dropped");
}

void OtlpExporter::warn(const std::string& what) {
  const auto now = Clock::now();
  if (last_warning_ != Clock::time_point{} && now - last_warning_ < kWarningEvery) return;
  last_warning_ = now;
  spdlog::warn("tracing: {} (idemproxy_trace_spans_dropped_total counts every drop)", what);
}

}  // namespace idemproxy::trace
