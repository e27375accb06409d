#include <algorithm>

#include "cli/cli.hpp"
#include "idemproxy/ops/records.hpp"

namespace idemproxy::cli {

std::string usage() {
  return "usage: idemproxy [serve] --config FILE [--no-migrate]\n"
         "       idemproxy migrate --config FILE\n"
         "       idemproxy check-config --config FILE\n"
         "       idemproxy policy --config FILE [--html]\n"
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

std::string command_help(const std::string& verb) {
  struct Help {
    const char* verb;
    const char* text;
  };
  static const Help kHelp[] = {
      {"serve",
       "usage: idemproxy [serve] --config FILE [--no-migrate]\n\n"
       "Runs the proxy: applies pending migrations (unless --no-migrate), then serves\n"
       "listen and admin_listen until SIGTERM or SIGINT (a drain), reloading on SIGHUP.\n"
       "While PostgreSQL is unreachable it serves anyway, /readyz says 503, and the\n"
       "migrations are retried with backoff.\n"},
      {"migrate",
       "usage: idemproxy migrate --config FILE\n\n"
       "Applies the pending migrations to store.postgres and exits; safe to run from many\n"
       "instances at once.\n"},
      {"check-config",
       "usage: idemproxy check-config --config FILE\n\n"
       "Validates the file: exit 0 when it loads (warnings on stderr), or FILE:LINE:COL:\n"
       "message on stderr and exit 2.\n"},
      {"policy",
       "usage: idemproxy policy --config FILE [--html]\n\n"
       "Prints the idempotency policy the file publishes (policy.path serves the same\n"
       "document): for each route its methods, key source, expiry, lease, stored\n"
       "statuses and every error with its status. JSON, or with --html the page.\n"},
      {"gc",
       "usage: idemproxy gc --config FILE\n\n"
       "Deletes every expired record now, in batches of 1000 (serve does it every\n"
       "gc.interval).\n"},
      {"keys",
       "usage: idemproxy keys show|purge|resolve|list --config FILE ...\n\n"
       "Inspects and repairs idempotency records (idemproxy keys COMMAND --help):\n"
       "  show     print one record as JSON\n"
       "  purge    delete one record; the next request with its key executes\n"
       "  resolve  release an indeterminate or stale record\n"
       "  list     the newest records, optionally in one state\n"},
      {"keys show",
       "usage: idemproxy keys show --config FILE --key K [--scope S]\n\n"
       "Prints one record as JSON: its state, fingerprint, times and stored response.\n"},
      {"keys purge",
       "usage: idemproxy keys purge --config FILE --key K [--scope S]\n\n"
       "Deletes one record; every instance's replay cache drops it. The next request\n"
       "with the key executes.\n"},
      {"keys resolve",
       "usage: idemproxy keys resolve --config FILE --key K [--scope S]\n\n"
       "Releases an indeterminate or stale record once you have checked the resource:\n"
       "the next request with the key executes.\n"},
      {"keys list",
       "usage: idemproxy keys list --config FILE [--state STATE] [--limit N]\n\n"
       "Lists the newest records (N from 1 to 1000, default 50), optionally in one state:\n"
       "in_flight, completed, released or indeterminate.\n"},
  };
  for (const Help& h : kHelp) {
    if (verb == h.verb) return h.text;
  }
  return usage();
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
    a.verb_given = true;
    if (a.verb == "keys") {
      if (i < argv.size() && (argv[i] == "--help" || argv[i] == "-h")) {
        a.help = true;
        return a;
      }
      if (i >= argv.size() || argv[i].starts_with("-")) {
        throw UsageError("keys needs show, purge, resolve or list");
      }
      a.verb += " " + argv[i++];
    }
  }
  static const std::vector<std::string> verbs = {"serve",      "migrate",      "check-config",
                                                 "policy",     "gc",           "keys show",
                                                 "keys purge", "keys resolve", "keys list"};
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
    else if (arg == "--html" && a.verb == "policy")
      a.html = true;
    else
      throw UsageError("unknown argument \"" + arg + "\"");
  }
  if (a.verb.starts_with("keys ") && a.verb != "keys list" && !a.key && !a.help) {
    throw UsageError(a.verb + " needs --key");
  }
  return a;
}

}  // namespace idemproxy::cli
