// Turns YAML into a validated Config. Every error names FILE:LINE:COL, and every
// unknown key is an error: a typo must not silently disable protection.
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/parser.h>

#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "config/reader.hpp"
#include "config/sections.hpp"
#include "config/tracing_reader.hpp"

namespace idemproxy::config {

ConfigError::ConfigError(const std::string& file, int line, int column, const std::string& message)
    : std::runtime_error(file + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                         message),
      line_(line),
      column_(column) {}

namespace {

using detail::Reader;
using detail::schema;
using detail::section;

Config parse_root(const YAML::Node& root, const Reader& r, const std::string& file) {
  Config c;
  c.path = file;
  if (!root.IsDefined() || root.IsNull()) r.fail(root, "the configuration is empty");
  r.expect_map(root, "the top level", section(""));
  if (root["listen"]) c.listen = r.endpoint(root["listen"], "listen");
  if (root["admin_listen"]) c.admin_listen = r.endpoint(root["admin_listen"], "admin_listen");
  if (root["scope_key"]) {
    c.scope_key = r.text(root["scope_key"], "scope_key");
    if (!c.scope_key.empty() && c.scope_key.size() < 32) {
      r.fail(root["scope_key"], "scope_key must be at least 32 characters");
    }
  }
  if (root["admin_token"]) {
    c.admin_token = r.text(root["admin_token"], "admin_token");
    if (!c.admin_token.empty() && c.admin_token.size() < 16) {
      r.fail(root["admin_token"],
             "admin_token must be at least 16 characters (or empty to turn the admin API off)");
    }
  }
  detail::read_upstream(root, r, c);
  detail::read_tls(root, r, c);
  detail::read_store(root, r, c);
  detail::read_server(root, r, c);
  detail::read_housekeeping(root, r, c);
  detail::read_routes(root, r, c);
  detail::read_tracing(root, r, c);
  c.warnings = r.take_warnings();
  return c;
}

// Where a second YAML document starts, if there is one. yaml-cpp 0.7 may also report
// "another document" without consuming anything (a stray ','): that is a syntax error.
struct SecondDocument {
  YAML::Mark at;
  bool stuck = false;
};

std::optional<SecondDocument> second_document(const std::string& text) {
  class DocumentStarts final : public YAML::EventHandler {
   public:
    void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
    void OnDocumentEnd() override {}
    void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
    void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
    void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  const std::string&) override {}
    void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                         YAML::EmitterStyle::value) override {}
    void OnSequenceEnd() override {}
    void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                    YAML::EmitterStyle::value) override {}
    void OnMapEnd() override {}
    std::vector<YAML::Mark> marks;
  } starts;
  std::istringstream in(text);
  YAML::Parser parser(in);
  if (!parser.HandleNextDocument(starts)) return std::nullopt;
  if (!parser.HandleNextDocument(starts) || starts.marks.size() < 2) return std::nullopt;
  return SecondDocument{starts.marks[1], starts.marks[1].pos <= starts.marks[0].pos};
}

// The one YAML document in `text`.
YAML::Node load_document(const std::string& text, const std::string& file) {
  try {
    // Load ignores whatever follows the first document, so count documents first.
    // Not with LoadAll: yaml-cpp 0.7's LoadAll loops forever on a document that starts
    // with ',' (found by fuzz/fuzz_config.cpp); asking for at most two cannot loop.
    if (const auto second = second_document(text)) {
      throw ConfigError(file, std::max(second->at.line, 0) + 1, std::max(second->at.column, 0) + 1,
                        second->stuck ? "this is not valid YAML (unexpected character)"
                                      : "the file holds more than one YAML document");
    }
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(file, std::max(e.mark.line, 0) + 1, std::max(e.mark.column, 0) + 1, e.msg);
  }
}

}  // namespace

Config parse_config(const std::string& text, const std::string& file, const EnvLookup& env) {
  const YAML::Node root = load_document(text, file);
  Reader reader(file, env);
  try {
    return parse_root(root, reader, file);
  } catch (const YAML::Exception& e) {
    // A shape the reader did not foresee still gets a position, never a bare throw.
    throw ConfigError(file, std::max(e.mark.line, 0) + 1, std::max(e.mark.column, 0) + 1, e.msg);
  }
}

Config load_config(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw ConfigError(file, 1, 1, "cannot open the configuration file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return parse_config(buffer.str(), file, process_env());
}

}  // namespace idemproxy::config
