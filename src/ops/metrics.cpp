#include "idemproxy/ops/metrics.hpp"

#include <array>
#include <sstream>

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
    case Outcome::upstream_error:
      return "upstream_error";
    case Outcome::bad_request:
      return "bad_request";
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

namespace {
constexpr std::array<double, 12> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                             0.1,   0.25,   0.5,   1,    2.5,   10};

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

void Metrics::count_request(const std::string& route, Outcome outcome) {
  std::lock_guard lock(mu_);
  ++requests_[{route, outcome}];
}

void Metrics::observe_upstream(double seconds) {
  std::lock_guard lock(mu_);
  ++upstream_count_;
  upstream_sum_ += seconds;
  for (double b : kBuckets) {
    if (seconds <= b) ++upstream_buckets_[b];
  }
}

std::string Metrics::render() const {
  std::ostringstream out;
  std::lock_guard lock(mu_);
  out << "# HELP idemproxy_requests_total Requests by route and outcome.\n"
         "# TYPE idemproxy_requests_total counter\n";
  for (const auto& [k, n] : requests_) {
    out << "idemproxy_requests_total{route=\"" << label(k.first) << "\",outcome=\""
        << to_string(k.second) << "\"} " << n << "\n";
  }
  out << "# HELP idemproxy_claims_in_flight Claims held by this process right now.\n"
         "# TYPE idemproxy_claims_in_flight gauge\n"
      << "idemproxy_claims_in_flight " << in_flight_claims_.load() << "\n";
  out << "# HELP idemproxy_store_errors_total Store calls that failed.\n"
         "# TYPE idemproxy_store_errors_total counter\n"
      << "idemproxy_store_errors_total " << store_errors_.load() << "\n";
  out << "# HELP idemproxy_gc_deleted_total Expired records deleted by in-process GC.\n"
         "# TYPE idemproxy_gc_deleted_total counter\n"
      << "idemproxy_gc_deleted_total " << gc_deleted_.load() << "\n";
  out << "# HELP idemproxy_config_reloads_total Configuration reloads by result.\n"
         "# TYPE idemproxy_config_reloads_total counter\n"
      << "idemproxy_config_reloads_total{result=\"ok\"} " << reloads_ok_.load() << "\n"
      << "idemproxy_config_reloads_total{result=\"rejected\"} " << reloads_rejected_.load()
      << "\n";
  out << "# HELP idemproxy_upstream_duration_seconds Upstream exchange time.\n"
         "# TYPE idemproxy_upstream_duration_seconds histogram\n";
  for (double b : kBuckets) {
    auto it = upstream_buckets_.find(b);
    out << "idemproxy_upstream_duration_seconds_bucket{le=\"" << b << "\"} "
        << (it == upstream_buckets_.end() ? 0 : it->second) << "\n";
  }
  out << "idemproxy_upstream_duration_seconds_bucket{le=\"+Inf\"} " << upstream_count_ << "\n"
      << "idemproxy_upstream_duration_seconds_sum " << upstream_sum_ << "\n"
      << "idemproxy_upstream_duration_seconds_count " << upstream_count_ << "\n";
  return out.str();
}

}  // namespace idemproxy::ops
