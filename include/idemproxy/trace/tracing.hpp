#pragma once
// Tracing as configured (tracing: in the config file): the OTLP exporter's thread and
// the tracer that feeds it, or, without an endpoint, a tracer that is off.
#include <memory>
#include <string>

#include "idemproxy/config/config.hpp"
#include "idemproxy/ops/metrics.hpp"
#include "idemproxy/trace/tracer.hpp"

namespace idemproxy::trace {

class OtlpExporter;

class Tracing {
 public:
  /// `version` is reported as the instrumentation scope's version and in User-Agent.
  /// Throws std::exception when https:// is configured and the trust store cannot load.
  Tracing(const config::TracingConfig& config, ops::Metrics& metrics, const std::string& version);
  /// Flushes for at most 5 s unless shutdown() ran.
  ~Tracing();
  Tracing(const Tracing&) = delete;
  Tracing& operator=(const Tracing&) = delete;

  const Tracer& tracer() const { return tracer_; }
  /// A reload: sample_ratio takes effect; the other keys are restart-only.
  void reload(const config::TracingConfig& next) { tracer_.set_sample_ratio(next.sample_ratio); }
  /// After the last request: exports what is queued within `bound`, drops the rest.
  void shutdown(Duration bound);

 private:
  std::unique_ptr<OtlpExporter> exporter_;  // null when tracing is off
  Tracer tracer_;
};

}  // namespace idemproxy::trace
