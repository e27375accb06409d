#include <cstdlib>
#include <stdexcept>

#include "idemproxy/config/config.hpp"

namespace idemproxy::config {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (value == nullptr) return std::nullopt;
    return std::string(value);
  };
}

std::string substitute_env(const std::string& text, const EnvLookup& env) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 2, "${") != 0) {
      out += text[i++];
      continue;
    }
    const std::size_t close = text.find('}', i + 2);
    if (close == std::string::npos) {
      throw std::invalid_argument("unterminated ${ in \"" + text + "\"");
    }
    const std::string inner = text.substr(i + 2, close - i - 2);
    const std::size_t sep = inner.find(":-");
    const std::string name = inner.substr(0, sep);
    if (name.empty()) throw std::invalid_argument("empty variable name in \"" + text + "\"");
    // ${NAME:-default}: the default when NAME is unset or empty; ${NAME}: its value,
    // empty or not, and an error when unset.
    if (const auto value = env(name); value && (!value->empty() || sep == std::string::npos)) {
      out += *value;
    } else if (sep != std::string::npos) {
      out += inner.substr(sep + 2);
    } else {
      throw std::invalid_argument("environment variable " + name + " is not set (use ${" + name +
                                  ":-default} for a default)");
    }
    i = close + 1;
  }
  return out;
}

}  // namespace idemproxy::config
