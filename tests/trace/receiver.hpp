#pragma once
// tests/otlp/receiver.js as a child process: an OTLP/HTTP receiver that decodes each
// export with the OpenTelemetry JS project's message definitions.
#include <nlohmann/json.hpp>
#include <string>

namespace idemproxy::trace::testing {

class Receiver {
 public:
  /// Starts `node tests/otlp/receiver.js 0` (after `npm ci` there, the first time);
  /// over TLS when given a PEM certificate and key.
  explicit Receiver(const std::string& cert_file = "", const std::string& key_file = "");
  ~Receiver();
  Receiver(const Receiver&) = delete;
  Receiver& operator=(const Receiver&) = delete;

  unsigned short port() const { return port_; }
  std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1/traces";
  }
  /// What it decoded: {exports, attempts, spans, resources, scopes, headers, errors}
  /// (over plain HTTP only).
  nlohmann::json received() const;
  /// How it answers exports from now on (receiver.js: POST /mode).
  void answer(const nlohmann::json& mode) const;

 private:
  nlohmann::json call(const char* method, const char* target, const std::string& body) const;

  int pid_ = -1;
  unsigned short port_ = 0;
};

/// A loopback port nothing listens on (bound, then closed).
unsigned short closed_port();

}  // namespace idemproxy::trace::testing
