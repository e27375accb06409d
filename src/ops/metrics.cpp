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

void Histogram::observe(double seconds) {
  std::lock_guard lock(mu_);
  ++count_;
  sum_ += seconds;
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) ++buckets_[i];
  }
}

void Histogram::render(std::ostream& out, const std::string& name, const std::string& help) const {
  std::lock_guard lock(mu_);
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " histogram\n";
  for (std::size_t i = 0; i < kBuckets.size(); ++i) {
    out << name << "_bucket{le=\"" << kBuckets[i] << "\"} " << buckets_[i] << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << count_ << "\n"
      << name << "_sum " << sum_ << "\n"
      << name << "_count " << count_ << "\n";
}

void Metrics::set_gauges(std::function<std::vector<GaugeSample>()> source) {
  std::lock_guard lock(mu_);
  gauges_ = std::move(source);
}

std::string Metrics::render() const {
  std::ostringstream out;
  std::function<std::vector<GaugeSample>()> gauges;
  {
    std::lock_guard lock(mu_);
    out << "# HELP idemproxy_requests_total Requests by route and outcome.\n"
           "# TYPE idemproxy_requests_total counter\n";
    for (const auto& [k, n] : requests_) {
      out << "idemproxy_requests_total{route=\"" << label(k.first) << "\",outcome=\""
          << to_string(k.second) << "\"} " << n << "\n";
    }
    gauges = gauges_;
  }
  const auto counter = [&out](const char* name, const char* help, std::uint64_t value) {
    out << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
        << name << " " << value << "\n";
  };
  out << "# HELP idemproxy_claims_in_flight Claims held by this process right now.\n"
         "# TYPE idemproxy_claims_in_flight gauge\n"
      << "idemproxy_claims_in_flight " << in_flight_claims_.load() << "\n";
  counter("idemproxy_store_errors_total", "Store calls that failed.", store_errors_.load());
  counter("idemproxy_lease_takeovers_total",
          "Claims that took over a record whose holder's lease ran out.", takeovers_.load());
  counter("idemproxy_lease_renewals_total",
          "Lease renewals by holders waiting on the upstream (the heartbeat).",
          lease_renewals_.load());
  counter("idemproxy_connections_refused_total",
          "Client connections closed at once because server.max_connections was reached.",
          refused_connections_.load());
  counter("idemproxy_replay_cache_hits_total",
          "Replays served from the in-process cache, without a database round trip.",
          cache_hits_.load());
  counter("idemproxy_tls_handshake_failures_total",
          "Client TLS handshakes that failed (no or untrusted client certificate, bad TLS).",
          tls_handshake_failures_.load());
  counter("idemproxy_gc_deleted_total", "Expired records deleted by in-process GC.",
          gc_deleted_.load());
  out << "# HELP idemproxy_config_reloads_total Configuration reloads by result.\n"
         "# TYPE idemproxy_config_reloads_total counter\n"
      << "idemproxy_config_reloads_total{result=\"ok\"} " << reloads_ok_.load() << "\n"
      << "idemproxy_config_reloads_total{result=\"rejected\"} " << reloads_rejected_.load() << "\n";
  upstream_.render(out, "idemproxy_upstream_duration_seconds",
                   "Upstream exchange time (to the response head when streamed).");
  store_.render(out, "idemproxy_store_duration_seconds",
                "Time of one store call on the database pool.");
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
