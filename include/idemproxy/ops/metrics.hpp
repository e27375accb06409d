#pragma once
// Process-wide counters, rendered in the Prometheus text exposition format.
#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace idemproxy::ops {

/// How a request ended, as counted in idemproxy_requests_total{outcome=...}.
enum class Outcome {
  passthrough,          // not covered, or covered without a key
  executed,             // forwarded under a claim; response stored
  executed_not_stored,  // forwarded under a claim; response too large: streamed, status kept
  released,             // forwarded under a claim; status not storable, claim released
  replayed,
  conflict,         // 409: same key in flight
  not_replayable,   // 409: the key's response was too large to store
  outcome_unknown,  // 409: the key's holder vanished (on_stale: fail)
  indeterminate,    // 409: the key's earlier request has an unknown outcome
  mismatch,         // 422
  missing_key,
  bad_key,
  too_large,
  store_unavailable,  // 503 (fail_closed)
  fail_open,          // forwarded without protection
  record_unreadable,  // 500: a sealed record does not open (key missing, or altered)
  upstream_error,     // 502
  bad_request,        // malformed HTTP
  expired,            // 409: a tombstoned key (after_expiry: reject), or a UUIDv7 key too old
  quota_exceeded,     // 429: a new key of a tenant at a cap of its route's quota
  // mode: shadow forwarded the request, but enforce would have answered:
  shadow_would_replay,
  shadow_would_conflict,  // 409
  shadow_would_mismatch,  // 422
  shadow_would_reject,    // 400, 413 or an unknown outcome
};
const char* to_string(Outcome outcome);

/// Why a span was not exported, as counted in idemproxy_trace_spans_dropped_total{reason=...}.
enum class SpanDrop {
  queue_full,     // the export queue was full (the exporter is slow, down or failing)
  export_failed,  // its export failed: a status not to retry, or retries exhausted
  rejected,       // the receiver answered but rejected it (OTLP partial success)
  shutdown,       // still queued when shutdown's flush bound ran out, or ended after
};
const char* to_string(SpanDrop reason);

/// Bucket bounds in seconds: 1 ms to 10 s, then 15, 30, 60, ... below `longest`,
/// then `longest` itself (upstream.timeout), so the slowest requests still fall in a
/// bucket of their own rather than only in +Inf.
std::vector<double> latency_buckets(double longest);

/// Counts per bucket (not cumulative; render() sums them), with their sum and count.
struct HistogramCounts {
  /// Writes the _bucket, _sum and _count lines; `labels` is empty or `a="b",`.
  void render(std::ostream& out, const std::string& name, const std::string& labels,
              const std::vector<double>& bounds) const;
  std::vector<std::uint64_t> buckets;
  std::uint64_t count = 0;
  double sum = 0;
};

/// The requests of one route with one outcome, observed without a lock: a count per
/// bucket, the last for those past every bound (so the total is their sum and a scrape
/// never reads a bucket ahead of the count), and the sum in nanoseconds.
class RequestCounts {
 public:
  explicit RequestCounts(std::size_t bounds) : buckets_(bounds + 1) {}
  void observe(const std::vector<double>& bounds, double seconds);
  /// What has been observed so far, as render() reads it.
  HistogramCounts read() const;

 private:
  std::vector<std::atomic<std::uint64_t>> buckets_;
  std::atomic<std::uint64_t> nanos_{0};
};

/// A Prometheus histogram of latencies (seconds), observed from any thread without a
/// lock (RequestCounts): a fresh key observes three.
class Histogram {
 public:
  explicit Histogram(double longest = 10)
      : bounds_(latency_buckets(longest)), counts_(bounds_.size()) {}
  void observe(double seconds) { counts_.observe(bounds_, seconds); }
  void render(std::ostream& out, const std::string& name, const std::string& help) const;

 private:
  const std::vector<double> bounds_;
  RequestCounts counts_;
};

/// What idemproxy_build_info reports.
struct BuildInfo {
  std::string version;   // the project version, e.g. 0.2.0
  std::string revision;  // `git describe` at build time, or empty
};

/// A gauge read when /metrics is scraped.
struct GaugeSample {
  std::string name;  // with labels, e.g. idemproxy_db_pool_connections{state="open"}
  std::string help;
  double value = 0;
  const char* type = "gauge";  // or "counter", for totals the source keeps
};

class Metrics {
 public:
  /// `longest`: the slowest a request may take (upstream.timeout), in seconds; the
  /// latency histograms have buckets up to it.
  explicit Metrics(BuildInfo build = {}, double longest = 30);
  /// Counts a finished request and observes its duration, by route and outcome.
  void count_request(const std::string& route, Outcome outcome, double seconds = 0) {
    counts(route, outcome).observe(request_bounds_, seconds);
  }
  void claim_started() { in_flight_claims_.fetch_add(1); }
  void claim_ended() { in_flight_claims_.fetch_sub(1); }
  std::int64_t in_flight_claims() const { return in_flight_claims_.load(); }
  void count_store_error() { store_errors_.fetch_add(1); }
  void count_takeover() { takeovers_.fetch_add(1); }
  /// A record this process marked indeterminate: its upstream exchange broke after
  /// the request was sent.
  void count_marked_indeterminate() { marked_indeterminate_.fetch_add(1); }
  /// The store's count of indeterminate records, sampled in the background.
  void set_indeterminate_records(std::int64_t n) { indeterminate_records_.store(n); }
  void count_lease_renewal() { lease_renewals_.fetch_add(1); }
  void count_refused_connection() { refused_connections_.fetch_add(1); }
  void count_tls_handshake_failure() { tls_handshake_failures_.fetch_add(1); }
  void count_http2_connection() { http2_connections_.fetch_add(1); }
  void count_http2_stream() { http2_streams_.fetch_add(1); }
  /// A GOAWAY this process sent with an error: `code` is the RFC 9113 §7 error code.
  void count_http2_goaway(std::uint32_t code) {
    http2_goaways_[code < kHttp2Codes ? code : kHttp2Codes - 1].fetch_add(1);
  }
  void count_cache_hit() { cache_hits_.fetch_add(1); }
  void count_attached() { attached_.fetch_add(1); }
  std::uint64_t attached() const { return attached_.load(); }
  void count_gc_deleted(std::uint64_t n) { gc_deleted_.fetch_add(n); }
  void count_gc_tombstoned(std::uint64_t n) { gc_tombstoned_.fetch_add(n); }
  void count_gc_swept(std::uint64_t n) { gc_swept_.fetch_add(n); }
  void count_reload(bool ok) { (ok ? reloads_ok_ : reloads_rejected_).fetch_add(1); }
  void count_spans_dropped(SpanDrop reason, std::uint64_t n = 1) {
    spans_dropped_[static_cast<std::size_t>(reason)].fetch_add(n, std::memory_order_relaxed);
  }
  void count_spans_exported(std::uint64_t n) {
    spans_exported_.fetch_add(n, std::memory_order_relaxed);
  }
  std::uint64_t spans_dropped(SpanDrop reason) const {
    return spans_dropped_[static_cast<std::size_t>(reason)].load();
  }
  std::uint64_t spans_exported() const { return spans_exported_.load(); }
  void observe_upstream(double seconds) { upstream_.observe(seconds); }
  void observe_store(double seconds) { store_.observe(seconds); }
  void observe_stream(double seconds) { streams_.observe(seconds); }
  /// Gauges owned elsewhere (database pool, pending completions), read at scrape time.
  void set_gauges(std::function<std::vector<GaugeSample>()> source);
  /// The exposition text for GET /metrics.
  std::string render() const;
  /// Requests by route and outcome, and the figures the admin page shows, as JSON
  /// (GET /admin/stats).
  nlohmann::json snapshot() const;

 private:
  /// The counts of `route` with `outcome`: from this thread's last few, or looked up
  /// (made the first time) under the lock.
  RequestCounts& counts(const std::string& route, Outcome outcome);

  const BuildInfo build_;
  const std::vector<double> request_bounds_;
  /// This instance among every Metrics the process made: what a thread's recent
  /// lookups are kept by (an address may be another instance's after this one ends).
  const std::uint64_t serial_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, Outcome>, std::unique_ptr<RequestCounts>> requests_;
  Histogram upstream_;
  Histogram store_;
  Histogram streams_;
  std::function<std::vector<GaugeSample>()> gauges_;
  std::atomic<std::int64_t> in_flight_claims_{0};
  std::atomic<std::uint64_t> store_errors_{0};
  std::atomic<std::uint64_t> takeovers_{0};
  std::atomic<std::uint64_t> marked_indeterminate_{0};
  std::atomic<std::int64_t> indeterminate_records_{-1};  // -1: not sampled yet
  std::atomic<std::uint64_t> lease_renewals_{0};
  std::atomic<std::uint64_t> refused_connections_{0};
  std::atomic<std::uint64_t> tls_handshake_failures_{0};
  std::atomic<std::uint64_t> http2_connections_{0};
  std::atomic<std::uint64_t> http2_streams_{0};
  // By error code, NO_ERROR (0) to HTTP_1_1_REQUIRED (0xd); the last slot counts any other.
  static constexpr std::uint32_t kHttp2Codes = 0xe + 1;
  std::array<std::atomic<std::uint64_t>, kHttp2Codes> http2_goaways_{};
  std::atomic<std::uint64_t> cache_hits_{0};
  std::atomic<std::uint64_t> attached_{0};
  std::atomic<std::uint64_t> gc_deleted_{0};
  std::atomic<std::uint64_t> gc_tombstoned_{0};
  std::atomic<std::uint64_t> gc_swept_{0};
  std::atomic<std::uint64_t> reloads_ok_{0};
  std::atomic<std::uint64_t> reloads_rejected_{0};
  static constexpr std::size_t kSpanDrops = static_cast<std::size_t>(SpanDrop::shutdown) + 1;
  std::array<std::atomic<std::uint64_t>, kSpanDrops> spans_dropped_{};
  std::atomic<std::uint64_t> spans_exported_{0};
};

}  // namespace idemproxy::ops
