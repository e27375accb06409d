#pragma once
// Command-line verbs. Exit codes: 0 success, 1 runtime error, 2 usage or config error.
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "idemproxy/config/config.hpp"
#include "idemproxy/store/pg_store.hpp"

namespace idemproxy::cli {

inline constexpr int kOk = 0;
inline constexpr int kRuntimeError = 1;
inline constexpr int kUsageError = 2;

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Args {
  std::string verb = "serve";  // serve | migrate | check-config | policy | gc | keys ...
  std::string config = "config/idemproxy.yaml";
  bool no_migrate = false;
  std::optional<std::string> key;
  std::string scope;
  std::string state;  // keys list
  int limit = 50;     // keys list
  bool help = false;
  bool version = false;
  bool html = false;        // policy --html
  bool verb_given = false;  // `idemproxy <command> --help` explains that command
};

/// Throws UsageError on anything it does not understand.
Args parse_args(const std::vector<std::string>& argv);
std::string usage();
/// What one command does and takes (`idemproxy <command> --help`).
std::string command_help(const std::string& verb);

/// The PostgreSQL store options a configuration asks for, with its own pool size.
store::PgOptions pg_options(const config::Config& c, int pool_size);

int serve(const Args& args);
int migrate(const Args& args);
int check_config(const Args& args);
/// Prints the published idempotency policy (JSON, or the page with --html).
int print_policy(const Args& args);
int gc(const Args& args);
int keys_show(const Args& args);
int keys_purge(const Args& args);
int keys_resolve(const Args& args);
int keys_list(const Args& args);

}  // namespace idemproxy::cli
