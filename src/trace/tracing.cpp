#include "idemproxy/trace/tracing.hpp"

#include <spdlog/spdlog.h>

#include "trace/otlp_exporter.hpp"

namespace idemproxy::trace {
namespace {

std::unique_ptr<OtlpExporter> exporter_for(const config::TracingConfig& config,
                                           ops::Metrics& metrics, const std::string& version) {
  if (!config.enabled()) return nullptr;
  spdlog::info("tracing: exporting spans to {} (sample_ratio {})", config.otlp_endpoint,
               config.sample_ratio);
  return std::make_unique<OtlpExporter>(config, metrics, version);
}

}  // namespace

Tracing::Tracing(const config::TracingConfig& config, ops::Metrics& metrics,
                 const std::string& version)
    : exporter_(exporter_for(config, metrics, version)),
      tracer_(exporter_ ? &exporter_->queue() : nullptr, config.sample_ratio) {}

Tracing::~Tracing() = default;  // the exporter's destructor flushes

void Tracing::shutdown(Duration bound) {
  if (exporter_) exporter_->shutdown(bound);
}

}  // namespace idemproxy::trace
