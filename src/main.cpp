// idemproxy: an HTTP reverse-proxy sidecar that makes any upstream API safe to retry.
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <iostream>

#include "cli/cli.hpp"
#include "idemproxy/config/config.hpp"

int main(int argc, char** argv) {
  using namespace idemproxy::cli;
  // libpq waits forever for an unreachable server unless told otherwise.
  setenv("PGCONNECT_TIMEOUT", "3", 0);
  try {
    const Args args = parse_args({argv + 1, argv + argc});
    if (args.help) {
      std::cout << (args.verb_given ? command_help(args.verb) : usage());
      return kOk;
    }
    if (args.version) {
      std::cout << "idemproxy " << IDEMPROXY_VERSION << "\n";
      return kOk;
    }
    if (args.verb == "serve") return serve(args);
    // The one-shot commands print their results on stdout (JSON for keys): log lines,
    // such as the audit line of a purge, go to stderr.
    spdlog::set_default_logger(spdlog::stderr_logger_mt("idemproxy"));
    if (args.verb == "migrate") return migrate(args);
    if (args.verb == "check-config") return check_config(args);
    if (args.verb == "policy") return print_policy(args);
    if (args.verb == "gc") return gc(args);
    if (args.verb == "keys show") return keys_show(args);
    if (args.verb == "keys purge") return keys_purge(args);
    if (args.verb == "keys list") return keys_list(args);
    return keys_resolve(args);
  } catch (const UsageError& e) {
    std::cerr << "idemproxy: " << e.what() << "\n\n" << usage();
    return kUsageError;
  } catch (const idemproxy::config::ConfigError& e) {
    std::cerr << e.what() << "\n";
    return kUsageError;
  } catch (const std::exception& e) {
    std::cerr << "idemproxy: " << e.what() << "\n";
    return kRuntimeError;
  }
}
