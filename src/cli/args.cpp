#include <algorithm>

#include "cli/cli.hpp"
#include "idemproxy/ops/records.hpp"

namespace idemproxy::cli {

std::string usage() {
  return "usage: idemproxy [serve] --config FILE [--no-migrate]\n"
         "       idemproxy migrate --config FILE\n"
         "       idemproxy check-config --config FILE\n"
         "       idemproxy gc --config FILE\n"
         "       idemproxy keys show --config FILE --key K [--scope S]\n"
         "       idemproxy keys purge --config FILE --key K [--scope S]\n"
         "       idemproxy keys resolve --config FILE --key K [--scope S]\n"
         "       idemproxy keys list --config FILE [--state STATE] [--limit N]\n"
         "       idemproxy --help | --version\n"
         "\n"
         "An HTTP reverse-proxy sidecar that makes any upstream API safe to retry.\n"
         "Exit codes: 0 success, 1 runtime error, 2 usage or configuration error.\n";
}

namespace {
int parse_limit(const std::string& v) {
  const auto limit = ops::parse_limit(v);
  if (!limit) throw UsageError("--limit needs a number from 1 to 1000");
  return *limit;
}
}  // namespace

Args parse_args(const std::vector<std::string>& argv) {
  Args a;
  std::size_t i = 0;
  if (i < argv.size() && !argv[i].starts_with("-")) {
    a.verb = argv[i++];
    if (a.verb == "keys") {
      if (i >= argv.size()) throw UsageError("keys needs show or purge");
      a.verb += " " + argv[i++];
    }
  }
  static const std::vector<std::string> verbs = {"serve",        "migrate",   "check-config",
                                                 "gc",           "keys show", "keys purge",
                                                 "keys resolve", "keys list"};
  if (std::find(verbs.begin(), verbs.end(), a.verb) == verbs.end()) {
    throw UsageError("unknown command \"" + a.verb + "\"");
  }
  auto value = [&](const std::string& flag) {
    if (i + 1 >= argv.size()) throw UsageError(flag + " needs a value");
    return argv[++i];
  };
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--config" || arg == "-c")
      a.config = value(arg);
    else if (arg.starts_with("--config="))
      a.config = arg.substr(9);
    else if (arg == "--no-migrate")
      a.no_migrate = true;
    else if (arg == "--key")
      a.key = value(arg);
    else if (arg == "--scope")
      a.scope = value(arg);
    else if (arg == "--state")
      a.state = value(arg);
    else if (arg == "--limit")
      a.limit = parse_limit(value(arg));
    else if (arg == "--help" || arg == "-h")
      a.help = true;
    else if (arg == "--version")
      a.version = true;
    else
      throw UsageError("unknown argument \"" + arg + "\"");
  }
  if (a.verb.starts_with("keys ") && a.verb != "keys list" && !a.key && !a.help) {
    throw UsageError(a.verb + " needs --key");
  }
  return a;
}

}  // namespace idemproxy::cli
