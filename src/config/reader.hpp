#pragma once
// Internal to the config loader: reading YAML nodes into values with FILE:LINE:COL
// errors, and the schema of accepted keys.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "idemproxy/config/config.hpp"

namespace idemproxy::config::detail {

/// Every key the loader accepts, by section ("" is the top level). The loader
/// enforces it (unknown keys are errors); documented_keys() exposes it.
const std::map<std::string, std::set<std::string>>& schema();
const std::set<std::string>& section(const std::string& name);

class Reader {
 public:
  Reader(std::string file, const EnvLookup& env) : file_(std::move(file)), env_(env) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& message) const {
    const YAML::Mark mark = at.Mark();
    throw ConfigError(file_, std::max(mark.line, 0) + 1, std::max(mark.column, 0) + 1, message);
  }

  /// Records a warning at `at` (Config::warnings): it loads, but is probably a mistake.
  void warn(const YAML::Node& at, const std::string& message) const {
    const YAML::Mark mark = at.Mark();
    warnings_.push_back(file_ + ":" + std::to_string(std::max(mark.line, 0) + 1) + ":" +
                        std::to_string(std::max(mark.column, 0) + 1) + ": " + message);
  }
  std::vector<std::string> take_warnings() const { return std::move(warnings_); }

  // Rejects keys of `map` that are not in `known`, and keys given twice (YAML 1.2
  // 3.2.1.1 requires unique keys; yaml-cpp would keep the first silently), naming the
  // path for context.
  void expect_map(const YAML::Node& map, const std::string& path,
                  const std::set<std::string>& known) const {
    if (!map.IsMap()) fail(map, path + " must be a mapping");
    std::map<std::string, int> seen;
    for (const auto& item : map) {
      if (!item.first.IsScalar()) fail(item.first, path + " has a key that is not a plain name");
      const auto key = item.first.as<std::string>();
      if (const auto [at, fresh] = seen.emplace(key, item.first.Mark().line + 1); !fresh) {
        fail(item.first, "duplicate key \"" + key + "\" in " + path + " (first at line " +
                             std::to_string(at->second) + "); only one may be given");
      }
      if (!known.contains(key)) {
        std::string list;
        for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
        fail(item.first,
             "unknown key \"" + key + "\" in " + path + " (expected one of: " + list + ")");
      }
    }
  }

  std::string text(const YAML::Node& node, const std::string& name) const {
    if (!node.IsScalar()) fail(node, name + " must be a scalar");
    try {
      return substitute_env(node.Scalar(), env_);
    } catch (const std::invalid_argument& e) {
      fail(node, name + ": " + e.what());
    }
  }

  template <class T, class Parse>
  T parsed(const YAML::Node& node, const std::string& name, Parse parse) const {
    try {
      return parse(text(node, name));
    } catch (const std::invalid_argument& e) {
      fail(node, name + ": " + e.what());
    }
  }

  /// One of a fixed set of words, e.g. reject|wait; anything else is an error naming them.
  template <class E>
  E choice(const YAML::Node& n, const std::string& name,
           std::initializer_list<std::pair<const char*, E>> options) const {
    const auto v = text(n, name);
    std::string words;
    for (const auto& [word, value] : options) {
      if (v == word) return value;
      words += (words.empty() ? "" : " or ") + std::string(word);
    }
    fail(n, name + " must be " + words + ", not \"" + v + "\"");
  }

  Duration duration(const YAML::Node& n, const std::string& name) const {
    return parsed<Duration>(n, name, parse_duration);
  }
  std::size_t size(const YAML::Node& n, const std::string& name) const {
    return parsed<std::size_t>(n, name, parse_size);
  }
  bool boolean(const YAML::Node& n, const std::string& name) const {
    const auto v = text(n, name);
    if (v == "true") return true;
    if (v == "false") return false;
    fail(n, name + " must be true or false, not \"" + v + "\"");
  }
  int integer(const YAML::Node& n, const std::string& name, int low, int high) const {
    const auto v = text(n, name);
    int out = 0;
    std::istringstream in(v);
    if (!(in >> out) || !in.eof() || out < low || out > high) {
      fail(n, name + " must be an integer from " + std::to_string(low) + " to " +
                  std::to_string(high) + ", not \"" + v + "\"");
    }
    return out;
  }
  std::vector<std::string> list(const YAML::Node& n, const std::string& name) const {
    if (!n.IsSequence()) fail(n, name + " must be a list, e.g. [a, b]");
    std::vector<std::string> out;
    for (const auto& item : n) out.push_back(text(item, name));
    return out;
  }

  Endpoint endpoint(const YAML::Node& n, const std::string& name) const {
    const auto v = text(n, name);
    const auto colon = v.rfind(':');
    if (colon == std::string::npos || colon == 0)
      fail(n, name + " must be HOST:PORT, not \"" + v + "\"");
    Endpoint e;
    e.host = v.substr(0, colon);
    if (e.host.size() > 2 && e.host.front() == '[' && e.host.back() == ']') {
      e.host = e.host.substr(1, e.host.size() - 2);
    }
    int port = -1;
    std::istringstream in(v.substr(colon + 1));
    if (!(in >> port) || !in.eof() || port < 0 || port > 65535) {
      fail(n, name + " has an invalid port in \"" + v + "\"");
    }
    e.port = static_cast<unsigned short>(port);
    return e;
  }

  void policy(const YAML::Node& n, const std::string& path, engine::RoutePolicy& p,
              bool is_route) const;
  void quota(const YAML::Node& v, const std::string& name, store::Quota& quota) const;
  void fingerprint_rule(const YAML::Node& v, const std::string& name,
                        engine::FingerprintRule& rule) const;

  /// A header field name: a token (RFC 9110 5.1, 5.6.2), or an error naming `name`.
  std::string field_name(const YAML::Node& n, const std::string& name) const;

 private:
  std::string file_;
  const EnvLookup& env_;
  mutable std::vector<std::string> warnings_;
};

// Every key the loader accepts, by section. The loader enforces it (unknown keys

}  // namespace idemproxy::config::detail
