#include "idemproxy/ops/metrics.hpp"

#include <algorithm>
#include <sstream>

#include "ops/process_metrics.hpp"

namespace idemproxy::ops {

const char* to_string(Outcome outcome) {
  switch (outcome) {
    case Outcome::passthrough:
      return "passthrough";
    case Outcome::executed:
      return "executed";
    case Outcome::released:
      return "released";
    case Outcome::replayed:
      return "replayed";
    case Outcome::conflict:
      return "conflict";
    case Outcome::outcome_unknown:
      return "outcome_unknown";
    case Outcome::indeterminate:
      return "indeterminate";
    case Outcome::mismatch:
      return "mismatch";
    case Outcome::missing_key:
      return "missing_key";
    case Outcome::bad_key:
      return "bad_key";
    case Outcome::too_large:
      return "too_large";
    case Outcome::store_unavailable:
      return "store_unavailable";
    case Outcome::fail_open:
      return "fail_open";
    case Outcome::executed_not_stored:
      return "executed_not_stored";
    case Outcome::not_replayable:
      return "not_replayable";
    case Outcome::record_unreadable:
      return "record_unreadable";
    case Outcome::upstream_error:
      return "upstream_error";
    case Outcome::bad_request:
      return "bad_request";
    case Outcome::expired:
      return "expired";
    case Outcome::quota_exceeded:
      return "quota_exceeded";
    case Outcome::shadow_would_replay:
      return "shadow_would_replay";
    case Outcome::shadow_would_conflict:
      return "shadow_would_conflict";
    case Outcome::shadow_would_mismatch:
      return "shadow_would_mismatch";
    case Outcome::shadow_would_reject:
      return "shadow_would_reject";
  }
  return "unknown";
}

const char* to_string(SpanDrop reason) {
  switch (reason) {
    case SpanDrop::queue_full:
      return "queue_full";
    case SpanDrop::export_failed:
      return "export_failed";
    case SpanDrop::rejected:
      return "rejected";
    case SpanDrop::shutdown:
      return "shutdown";
  }
  return "unknown";
}

namespace {
// Prometheus label values escape backslash, quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}
}  // namespace

std::vector<double> latency_buckets(double longest) {
  std::vector<double> bounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                0.25,  0.5,    1,     2.5,  5,     10};
  for (const double next : {15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0}) {
    if (next < longest) bounds.push_back(next);
  }
  if (longest > bounds.back()) bounds.push_back(longest);
  return bounds;
}

void HistogramCounts::render(std::ostream& out, const std::string& name, const std::string& labels,
                             const std::vector<double>& bounds) const {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += buckets.empty() ? 0 : buckets[i];
    out << name << "_bucket{" << labels << "le=\"" << bounds[i] << "\"} " << cumulative << "\n";
  }
  const std::string plain = labels.empty() ? "" : "{" + labels.substr(0, labels.size() - 1) + "}";
  out << name << "_bucket{" << labels << "le=\"+Inf\"} " << count << "\n"
      << name << "_sum" << plain << " " << sum << "\n"
      << name << "_count" << plain << " " << count << "\n";
}

void RequestCounts::observe(const std::vector<double>& bounds, double seconds) {
  const auto at = std::lower_bound(bounds.begin(), bounds.end(), seconds);
  buckets_[static_cast<std::size_t>(at - bounds.begin())].fetch_add(1, std::memory_order_relaxed);
  const double nanos = std::max(seconds, 0.0) * 1e9;
  nanos_.fetch_add(static_cast<std::uint64_t>(nanos), std::memory_order_relaxed);
}

HistogramCounts RequestCounts::read() const {
  HistogramCounts out;
  out.buckets.reserve(buckets_.size() - 1);
  for (const auto& b : buckets_) {
    const auto n = b.load(std::memory_order_relaxed);
    if (out.buckets.size() < buckets_.size() - 1) out.buckets.push_back(n);
    out.count += n;
  }
  out.sum = static_cast<double>(nanos_.load(std::memory_order_relaxed)) / 1e9;
  return out;
}

void Histogram::render(std::ostream& out, const std::string& name, const std::string& help) const {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  counts_.read().render(out, name, "", bounds_);
}

namespace {
std::atomic<std::uint64_t> metrics_made{0};
}  // namespace

Metrics::Metrics(BuildInfo build, double longest)
    : build_(std::move(build)),
      request_bounds_(latency_buckets(longest)),
      serial_(++metrics_made),
      upstream_(longest),
      store_(10),
      streams_(3600) {}

RequestCounts& Metrics::counts(const std::string& route, Outcome outcome) {
  // A thread's requests end with few routes and outcomes: the last eight it counted
  // are found without the lock and the map's search of (route, outcome) pairs.
  struct Recent {
    std::uint64_t metrics = 0;
    Outcome outcome{};
    std::string route;
    RequestCounts* counts = nullptr;
  };
  struct RecentCounts {
    std::array<Recent, 8> slots;
    std::size_t next = 0;
  };
  thread_local RecentCounts recent;
  for (const auto& r : recent.slots) {
    if (r.metrics == serial_ && r.outcome == outcome && r.route == route) return *r.counts;
  }
  RequestCounts* counts = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& slot = requests_[{route, outcome}];
    if (!slot) slot = std::make_unique<RequestCounts>(request_bounds_.size());
    counts = slot.get();
  }
  auto& r = recent.slots[recent.next++ % recent.slots.size()];
  r.metrics = serial_;
  r.outcome = outcome;
  r.route.assign(route);
  r.counts = counts;
  return *counts;
}

void Metrics::set_gauges(std::function<std::vector<GaugeSample>()> source) {
  std::lock_guard lock(mu_);
  gauges_ = std::move(source);
}

nlohmann::json Metrics::snapshot() const {
  nlohmann::json requests = nlohmann::json::array();
  {
    std::lock_guard lock(mu_);
    for (const auto& [k, h] : requests_) {
      requests.push_back(
          {{"route", k.first}, {"outcome", to_string(k.second)}, {"count", h->read().count}});
    }
  }
  nlohmann::json out = {{"requests", std::move(requests)},
                        {"claims_in_flight", in_flight_claims_.load()},
                        {"lease_takeovers", takeovers_.load()},
                        {"indeterminate_marked", marked_indeterminate_.load()},
                        {"store_errors", store_errors_.load()},
                        {"replay_cache_hits", cache_hits_.load()}};
  if (const auto n = indeterminate_records_.load(); n >= 0) out["records_indeterminate"] = n;
  return out;
}

std::string Metrics::render() const {
  std::ostringstream out;
  std::function<std::vector<GaugeSample>()> gauges;
  {
    std::lock_guard lock(mu_);
    // Each read once, so a pair's total and its histogram's count agree.
    std::vector<HistogramCounts> read;
    read.reserve(requests_.size());
    for (const auto& entry : requests_) read.push_back(entry.second->read());
    out << "# HELP idemproxy_requests_total Requests by route and outcome.\n"
           "# TYPE idemproxy_requests_total counter\n";
    auto counts = read.begin();
    for (const auto& entry : requests_) {
      out << "idemproxy_requests_total{route=\"" << label(entry.first.first) << "\",outcome=\""
          << to_string(entry.first.second) << "\"} " << (counts++)->count << "\n";
    }
    out << "# HELP idemproxy_request_duration_seconds Time from a request's first byte to "
           "its answer's last, by route and outcome.\n"
           "# TYPE idemproxy_request_duration_seconds histogram\n";
    counts = read.begin();
    for (const auto& entry : requests_) {
      const auto& [route, outcome] = entry.first;
      const std::string labels =
          "route=\"" + label(route) + "\",outcome=\"" + to_string(outcome) + "\",";
      (counts++)->render(out, "idemproxy_request_duration_seconds", labels, request_bounds_);
    }
    gauges = gauges_;
  }
  const auto counter = [&out](const char* name, const char* help, std::uint64_t value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
        << name << " " << value << "\n";
  };
  out << "# HELP idemproxy_build_info The running build: version and revision.\n"
         "# TYPE idemproxy_build_info gauge\n"
      << "idemproxy_build_info{version=\"" << label(build_.version) << "\",revision=\""
      << label(build_.revision) << "\"} 1\n";
  render_process_metrics(out);
  out << "# HELP idemproxy_claims_in_flight Claims held by this process right now.\n"
         "# TYPE idemproxy_claims_in_flight gauge\n"
      << "idemproxy_claims_in_flight " << in_flight_claims_.load() << "\n";
  counter("idemproxy_store_errors_total", "Store calls that failed.", store_errors_.load());
  counter("idemproxy_lease_takeovers_total",
          "Claims that took over a record whose holder's lease ran out.", takeovers_.load());
  counter("idemproxy_indeterminate_marked_total",
          "Records this process marked indeterminate: the upstream exchange broke after the "
          "request was sent.",
          marked_indeterminate_.load());
  if (const auto n = indeterminate_records_.load(); n >= 0) {
    out << "# HELP idemproxy_records_indeterminate Indeterminate records in the store, "
           "sampled every 10 s.\n"
           "# TYPE idemproxy_records_indeterminate gauge\n"
        << "idemproxy_records_indeterminate " << n << "\n";
  }
  counter("idemproxy_lease_renewals_total",
          "Lease renewals by holders waiting on the upstream (the heartbeat).",
          lease_renewals_.load());
  counter("idemproxy_connections_refused_total",
          "Client connections closed at once because server.max_connections was reached.",
          refused_connections_.load());
  counter("idemproxy_replay_cache_hits_total",
          "Replays served from the in-process cache, without a database round trip.",
          cache_hits_.load());
  counter("idemproxy_attached_total",
          "Retries attached to a stream in flight on this instance (on_concurrent: wait).",
          attached_.load());
  counter("idemproxy_tls_handshake_failures_total",
          "Client TLS handshakes that failed (no or untrusted client certificate, bad TLS).",
          tls_handshake_failures_.load());
  counter("idemproxy_http2_connections_total", "HTTP/2 client connections (h2c or h2).",
          http2_connections_.load());
  counter("idemproxy_http2_streams_total", "HTTP/2 request streams begun.", http2_streams_.load());
  {
    // RFC 9113 §7; NO_ERROR is a graceful GOAWAY and not counted.
    static constexpr const char* kCodes[] = {"NO_ERROR",
                                             "PROTOCOL_ERROR",
                                             "INTERNAL_ERROR",
                                             "FLOW_CONTROL_ERROR",
                                             "SETTINGS_TIMEOUT",
                                             "STREAM_CLOSED",
                                             "FRAME_SIZE_ERROR",
                                             "REFUSED_STREAM",
                                             "CANCEL",
                                             "COMPRESSION_ERROR",
                                             "CONNECT_ERROR",
                                             "ENHANCE_YOUR_CALM",
                                             "INADEQUATE_SECURITY",
                                             "HTTP_1_1_REQUIRED",
                                             "OTHER"};
    out << "# HELP idemproxy_http2_goaway_errors_total HTTP/2 connections the proxy ended "
           "with an error, by the GOAWAY's error code.\n"
           "# TYPE idemproxy_http2_goaway_errors_total counter\n";
    for (std::uint32_t code = 1; code < kHttp2Codes; ++code) {
      out << "idemproxy_http2_goaway_errors_total{code=\"" << kCodes[code] << "\"} "
          << http2_goaways_[code].load() << "\n";
    }
  }
  counter("idemproxy_gc_deleted_total", "Expired records deleted by in-process GC.",
          gc_deleted_.load());
  counter("idemproxy_gc_tombstoned_total",
          "Records whose answer in-process GC dropped after ttl, kept as tombstones "
          "(after_expiry: reject).",
          gc_tombstoned_.load());
  counter("idemproxy_gc_chunks_swept_total",
          "Chunks of streamed answers that no record reads (a takeover's, a release's), "
          "deleted by in-process GC.",
          gc_swept_.load());
  out << "# HELP idemproxy_config_reloads_total Configuration reloads by result.\n"
         "# TYPE idemproxy_config_reloads_total counter\n"
      << "idemproxy_config_reloads_total{result=\"ok\"} " << reloads_ok_.load() << "\n"
      << "idemproxy_config_reloads_total{result=\"rejected\"} " << reloads_rejected_.load() << "\n";
  out << "# HELP idemproxy_trace_spans_dropped_total Spans not exported (tracing), by reason.\n"
         "# TYPE idemproxy_trace_spans_dropped_total counter\n";
  for (std::size_t r = 0; r < kSpanDrops; ++r) {
    out << "idemproxy_trace_spans_dropped_total{reason=\"" << to_string(static_cast<SpanDrop>(r))
        << "\"} " << spans_dropped_[r].load() << "\n";
  }
  counter("idemproxy_trace_spans_exported_total", "Spans the OTLP receiver accepted (tracing).",
          spans_exported_.load());
  upstream_.render(out, "idemproxy_upstream_duration_seconds",
                   "Upstream exchange time (to the response head when streamed).");
  store_.render(out, "idemproxy_store_duration_seconds",
                "Time of one store call on the database pool.");
  streams_.render(out, "idemproxy_stream_duration_seconds",
                  "Streamed answers on covered routes, from the head to the end of the body.");
  if (gauges) {
    std::string last_family;
    for (const auto& g : gauges()) {
      const std::string family = g.name.substr(0, g.name.find('{'));
      if (family != last_family) {
        out << "# HELP " << family << " " << g.help << "\n# TYPE " << family << " " << g.type
            << "\n";
        last_family = family;
      }
      out << g.name << " " << g.value << "\n";
    }
  }
  return out.str();
}

}  // namespace idemproxy::ops
