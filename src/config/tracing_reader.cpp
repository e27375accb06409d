// tracing: where spans are exported (OTLP/HTTP), how many, and with which headers.
#include "config/tracing_reader.hpp"

#include <algorithm>
#include <boost/url/parse.hpp>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string_view>

namespace idemproxy::config::detail {
namespace {

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// The endpoint is used as given (the OTLP exporter spec's signal-specific endpoint:
// no /v1/traces is appended), so a collector's URL is written out whole.
void read_endpoint(const YAML::Node& n, const Reader& r, TracingConfig& t) {
  const std::string name = "tracing.otlp_endpoint";
  t.otlp_endpoint = r.text(n, name);
  if (t.otlp_endpoint.empty()) return;  // explicitly off, e.g. ${OTLP_ENDPOINT:-}
  const auto parsed = boost::urls::parse_uri(t.otlp_endpoint);
  if (!parsed) r.fail(n, name + " is not a valid URL: \"" + t.otlp_endpoint + "\"");
  t.tls = parsed->scheme() == "https";
  if (parsed->scheme() != "http" && !t.tls) {
    r.fail(n, name + " must be an http:// or https:// URL (OTLP/HTTP), not \"" + t.otlp_endpoint +
                  "\"");
  }
  if (parsed->host().empty()) r.fail(n, name + " has no host");
  // Credentials belong in tracing.headers, which are not part of the URL logged.
  if (parsed->has_userinfo())
    r.fail(n, name + " must not carry user:password@; use tracing.headers");
  if (parsed->has_fragment()) r.fail(n, name + " must not have a fragment");
  t.host = std::string(parsed->host());
  if (t.host.size() > 2 && t.host.front() == '[') t.host = t.host.substr(1, t.host.size() - 2);
  if (parsed->has_port()) {
    if (parsed->port_number() == 0) r.fail(n, name + " has an invalid port");
    t.port = std::string(parsed->port());
  } else {
    t.port = t.tls ? "443" : "80";
  }
  t.target = std::string(parsed->encoded_path());
  if (t.target.empty()) t.target = "/";
  if (parsed->has_query()) t.target += "?" + std::string(parsed->encoded_query());
  if (t.target == "/") {
    r.warn(n, name + " has no path; an OpenTelemetry collector receives traces at /v1/traces");
  }
}

// A number from 0 to 1.
double read_ratio(const YAML::Node& n, const Reader& r) {
  const std::string v = r.text(n, "tracing.sample_ratio");
  double ratio = -1;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), ratio);
  if (ec != std::errc{} || end != v.data() + v.size() || !std::isfinite(ratio) || ratio < 0 ||
      ratio > 1) {
    r.fail(n, "tracing.sample_ratio must be a number from 0 to 1 (e.g. 0.25), not \"" + v + "\"");
  }
  return ratio;
}

// Field names are tokens (RFC 9110 5.1); values carry no CR, LF or NUL (RFC 9110 5.5).
void read_headers(const YAML::Node& n, const Reader& r, TracingConfig& t) {
  if (n.IsNull()) return;
  if (!n.IsMap()) r.fail(n, "tracing.headers must be a mapping of field names to values");
  for (const auto& item : n) {
    const std::string name = r.field_name(item.first, "tracing.headers");
    for (const std::string_view own :
         {"Content-Type", "Content-Length", "Host", "Connection", "Transfer-Encoding"}) {
      if (iequals(name, own)) {
        r.fail(item.first,
               "tracing.headers: " + name + " is set by the exporter and cannot be configured");
      }
    }
    const bool duplicate = std::any_of(t.headers.begin(), t.headers.end(),
                                       [&](const auto& h) { return iequals(h.first, name); });
    if (duplicate) r.fail(item.first, "tracing.headers: " + name + " is given twice");
    const std::string value = r.text(item.second, "tracing.headers." + name);
    if (value.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) {
      r.fail(item.second, "tracing.headers." + name + " must not contain CR, LF or NUL");
    }
    t.headers.emplace(name, value);
  }
}

}  // namespace

void read_tracing(const YAML::Node& root, const Reader& r, Config& c) {
  const YAML::Node node = root["tracing"];
  if (!node || node.IsNull()) return;
  r.expect_map(node, "tracing", section("tracing"));
  TracingConfig& t = c.tracing;
  if (node["otlp_endpoint"]) read_endpoint(node["otlp_endpoint"], r, t);
  if (node["service_name"]) {
    t.service_name = r.text(node["service_name"], "tracing.service_name");
    if (t.service_name.empty()) r.fail(node["service_name"], "tracing.service_name is empty");
  }
  if (node["sample_ratio"]) t.sample_ratio = read_ratio(node["sample_ratio"], r);
  if (node["headers"]) read_headers(node["headers"], r, t);
  if (node["timeout"]) {
    t.timeout = r.duration(node["timeout"], "tracing.timeout");
    if (t.timeout.count() <= 0) r.fail(node["timeout"], "tracing.timeout must be longer than 0");
  }
  if (node["batch_delay"]) {
    t.batch_delay = r.duration(node["batch_delay"], "tracing.batch_delay");
    if (t.batch_delay.count() <= 0) {
      r.fail(node["batch_delay"], "tracing.batch_delay must be longer than 0");
    }
  }
  if (node["max_queue"]) {
    t.max_queue =
        static_cast<std::size_t>(r.integer(node["max_queue"], "tracing.max_queue", 1, 1000000));
  }
  if (node["max_batch"]) {
    t.max_batch =
        static_cast<std::size_t>(r.integer(node["max_batch"], "tracing.max_batch", 1, 100000));
  }
  if (t.max_batch > t.max_queue) {
    r.fail(node["max_batch"] ? node["max_batch"] : node,
           "tracing.max_batch (" + std::to_string(t.max_batch) +
               ") must not exceed tracing.max_queue (" + std::to_string(t.max_queue) + ")");
  }
}

}  // namespace idemproxy::config::detail
