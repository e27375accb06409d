// Config loading: any text either loads or fails with a ConfigError at FILE:LINE:COL;
// nothing else escapes, nothing crashes, and no error is yaml-cpp's own "invalid node".
#include <cstdint>
#include <cstdlib>
#include <string>

#include "idemproxy/config/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const idemproxy::config::EnvLookup env =
      [](const std::string& name) -> std::optional<std::string> {
    if (name == "SET") return std::string("value");
    return std::nullopt;
  };
  try {
    const auto config = idemproxy::config::parse_config(text, "fuzz.yaml", env);
    if (config.upstream.host.empty()) std::abort();  // a loaded config is usable
  } catch (const idemproxy::config::ConfigError& e) {
    if (std::string(e.what()).rfind("fuzz.yaml:", 0) != 0) std::abort();
    if (e.line() < 1 || e.column() < 1) std::abort();
    // yaml-cpp's own "invalid node" means the loader read a key that is not there (or
    // assigned to such a Node) and hid the real error (issue 22).
    // Its message stands right after the position; a key name that merely contains
    // the words (the fuzzer tries its dictionary) is not it.
    const std::string at = "fuzz.yaml:" + std::to_string(e.line()) + ":" +
                           std::to_string(e.column()) + ": invalid node;";
    if (std::string(e.what()).rfind(at, 0) == 0) std::abort();
  }
  return 0;
}
