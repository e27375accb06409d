#include "idemproxy/config/config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

using namespace idemproxy::config;
using namespace std::chrono_literals;

namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

const char* kMinimal =
    "upstream:\n"
    "  url: http://127.0.0.1:3000\n"
    "store:\n"
    "  memory: {}\n";

// A file without routes is an error; tests about other keys get one at the end
// (which moves no line or column they check).
const char* kAnyRoute = "routes: [{name: any, path_prefix: /any}]\n";

Config parse(const std::string& text, std::map<std::string, std::string> vars = {}) {
  const bool routed = text.find("routes") != std::string::npos ||
                      text.find("store:") == std::string::npos;  // not a whole file
  return parse_config(routed ? text : text + kAnyRoute, "test.yaml", env_of(std::move(vars)));
}

// Returns "LINE:COL: message" of the error the text produces.
std::string error_of(const std::string& text, std::map<std::string, std::string> vars = {}) {
  try {
    parse(text, std::move(vars));
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("test.yaml:", 0), 0u) << what;
    return what.substr(std::string("test.yaml:").size());
  }
  ADD_FAILURE() << "no error for:\n" << text;
  return "";
}

// "LINE:COL" of the error the text produces.
std::string where(const std::string& text, std::map<std::string, std::string> vars = {}) {
  const std::string e = error_of(text, std::move(vars));
  return e.substr(0, e.find(": "));
}

}  // namespace

TEST(Units, Durations) {
  EXPECT_EQ(parse_duration("500ms"), 500ms);
  EXPECT_EQ(parse_duration("30s"), 30s);
  EXPECT_EQ(parse_duration("5m"), 5min);
  EXPECT_EQ(parse_duration("24h"), 24h);
  EXPECT_THROW(parse_duration("30"), std::invalid_argument);
  EXPECT_THROW(parse_duration("s"), std::invalid_argument);
  EXPECT_THROW(parse_duration("1.5s"), std::invalid_argument);
  EXPECT_THROW(parse_duration("-1s"), std::invalid_argument);
}

// Found by fuzz_config: hours{n} multiplied past int64 (undefined behaviour) instead
// of an error.
TEST(Units, DurationsThatDoNotFitAreErrorsNotOverflows) {
  EXPECT_EQ(parse_duration("36500d"), 36500 * 24h);
  EXPECT_THROW(parse_duration("36501d"), std::invalid_argument);
  EXPECT_THROW(parse_duration("7173733806442603404h"), std::invalid_argument);
  EXPECT_THROW(parse_duration("18446744073709551615ms"), std::invalid_argument);
  EXPECT_THROW(parse_duration("99999999999999999999s"), std::invalid_argument);
}

TEST(Units, Sizes) {
  EXPECT_EQ(parse_size("64KiB"), 64u * 1024);
  EXPECT_EQ(parse_size("1MiB"), 1024u * 1024);
  EXPECT_EQ(parse_size("512"), 512u);
  EXPECT_THROW(parse_size("1MB"), std::invalid_argument);
}

TEST(Units, SizesThatDoNotFitAreErrorsNotWrapped) {
  EXPECT_EQ(parse_size("1024GiB"), std::size_t{1} << 40);
  EXPECT_THROW(parse_size("1025GiB"), std::invalid_argument);
  EXPECT_THROW(parse_size("17179869184GiB"), std::invalid_argument);  // 2^34 << 30 wraps
}

TEST(EnvSubstitution, VariablesAndDefaults) {
  auto env = env_of({{"A", "alpha"}, {"EMPTY", ""}});
  EXPECT_EQ(substitute_env("x-${A}-y", env), "x-alpha-y");
  EXPECT_EQ(substitute_env("${MISSING:-fallback}", env), "fallback");
  EXPECT_EQ(substitute_env("${EMPTY:-fallback}", env), "fallback");
  EXPECT_EQ(substitute_env("${A:-fallback}", env), "alpha");
  EXPECT_THROW(substitute_env("${MISSING}", env), std::invalid_argument);
  EXPECT_THROW(substitute_env("${A", env), std::invalid_argument);
}

TEST(Config, MinimalFileGetsSpecDefaults) {
  const Config c = parse(kMinimal);
  EXPECT_EQ(c.listen.port, 8080);
  EXPECT_EQ(c.admin_listen.port, 9090);
  EXPECT_EQ(c.upstream.host, "127.0.0.1");
  EXPECT_EQ(c.upstream.port, "3000");
  EXPECT_EQ(c.store.kind, StoreConfig::Kind::memory);
  EXPECT_EQ(c.defaults.header, "Idempotency-Key");
  EXPECT_EQ(c.defaults.ttl, 24h);
  EXPECT_EQ(c.defaults.lease, 30s);
  EXPECT_EQ(c.defaults.max_body, 1024u * 1024);
  ASSERT_EQ(c.routes.size(), 1u);  // kAnyRoute
  EXPECT_EQ(c.routes[0].methods, (std::vector<std::string>{"POST", "PATCH"}));
  EXPECT_TRUE(c.warnings.empty());
}

// Issue 12: typos that used to load and silently leave requests unprotected.
TEST(ConfigTypos, NoRoutesAtAllIsAnError) {
  const auto env = env_of({});
  try {
    parse_config(kMinimal, "test.yaml", env);
    ADD_FAILURE() << "a file without routes loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no routes"), std::string::npos) << e.what();
  }
  EXPECT_NE(error_of(std::string(kMinimal) + "routes: []\n").find("no routes"), std::string::npos);
}

TEST(ConfigTypos, DuplicateKeysAreErrorsAtTheSecondOne) {
  EXPECT_EQ(where(std::string(kMinimal) + "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n"), "6:1");
  EXPECT_NE(error_of(std::string(kMinimal) + "listen: 127.0.0.1:1\nlisten: 127.0.0.1:2\n")
                .find("duplicate key \"listen\""),
            std::string::npos);
  EXPECT_EQ(where(std::string(kMinimal) +
                  "routes:\n  - name: a\n    path_prefix: /a\n    key_required: true\n"
                  "    key_required: false\n"),
            "9:5");
}

TEST(ConfigTypos, MethodsMustBeNamedAndUnknownOnesAreWarnedAbout) {
  EXPECT_NE(error_of(std::string(kMinimal) + "routes: [{name: a, path_prefix: /a, methods: []}]\n")
                .find("is empty"),
            std::string::npos);
  EXPECT_EQ(where(std::string(kMinimal) +
                  "routes: [{name: a, path_prefix: /a, methods: [POST, \"PO ST\"]}]\n"),
            "5:53");  // yaml-cpp marks a flow sequence item at the separator before it
  const Config c =
      parse(std::string(kMinimal) + "routes: [{name: a, path_prefix: /a, methods: [pots]}]\n");
  EXPECT_EQ(c.routes[0].methods, std::vector<std::string>{"POTS"});
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0].rfind("test.yaml:5:47: ", 0), 0u) << c.warnings[0];
  EXPECT_NE(c.warnings[0].find("POTS is not a method"), std::string::npos);
  EXPECT_TRUE(parse(std::string(kMinimal) +
                    "routes: [{name: a, path_prefix: /a, methods: [post, PUT, delete]}]\n")
                  .warnings.empty());
}

TEST(ConfigTypos, HeaderNamesMustBeFieldNames) {
  EXPECT_EQ(where(std::string(kMinimal) + "defaults: {header: \"Idempotency Key\"}\n"), "5:20");
  EXPECT_NE(error_of(std::string(kMinimal) + "defaults: {scope_header: \"X Tenant\"}\n")
                .find("header field name"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "defaults: {scope: {from: header, header: \"a:b\"}}\n")
                .find("header field name"),
            std::string::npos);
  EXPECT_EQ(parse(std::string(kMinimal) + "defaults: {header: X-Idem_Key.1}\n").defaults.header,
            "X-Idem_Key.1");
}

TEST(ConfigTypos, ARouteHiddenBehindAnEarlierPrefixIsAnError) {
  const std::string e = error_of(std::string(kMinimal) +
                                 "routes:\n  - {name: all, path_prefix: /v1}\n"
                                 "  - {name: orders, path_prefix: /v1/orders}\n");
  EXPECT_EQ(e.substr(0, e.find(": ")), "7:33");
  EXPECT_NE(e.find("route \"orders\" (path_prefix /v1/orders) can never match: route \"all\""),
            std::string::npos)
      << e;
  // The longer prefix first is the fix; /v1/ordersx is not under /v1/orders.
  EXPECT_EQ(parse(std::string(kMinimal) +
                  "routes:\n  - {name: orders, path_prefix: /v1/orders}\n"
                  "  - {name: x, path_prefix: /v1/ordersx}\n  - {name: all, path_prefix: /v1}\n")
                .routes.size(),
            3u);
  // A case-insensitive route behind a case-sensitive one still matches other spellings.
  EXPECT_EQ(
      parse(std::string(kMinimal) + "routes:\n  - {name: lower, path_prefix: /v1}\n"
                                    "  - {name: any, path_prefix: /v1/o, case_sensitive: false}\n")
          .routes.size(),
      2u);
  EXPECT_NE(error_of(std::string(kMinimal) +
                     "routes:\n  - {name: any, path_prefix: /V1, case_sensitive: false}\n"
                     "  - {name: lower, path_prefix: /v1/o}\n")
                .find("can never match"),
            std::string::npos);
}

TEST(Config, RoutesInheritDefaultsAndOverrideThem) {
  const Config c = parse(std::string(kMinimal) +
                         "defaults:\n"
                         "  ttl: 1h\n"
                         "  on_concurrent: wait\n"
                         "routes:\n"
                         "  - name: orders\n"
                         "    path_prefix: /v1/orders\n"
                         "    ttl: 72h\n"
                         "  - name: health\n"
                         "    path_prefix: /status\n"
                         "    enabled: false\n");
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[0].ttl, 72h);
  EXPECT_EQ(c.routes[0].on_concurrent, idemproxy::engine::OnConcurrent::wait);
  EXPECT_EQ(c.routes[1].ttl, 1h);
  EXPECT_FALSE(c.routes[1].enabled);
}

TEST(Config, EnvironmentIsSubstitutedInScalars) {
  const Config c = parse(
      "upstream:\n  url: http://${UP_HOST}:${UP_PORT:-3000}\n"
      "store:\n  postgres:\n    dsn: ${DSN}\n",
      {{"UP_HOST", "10.0.0.1"}, {"DSN", "postgresql://x@y/z"}});
  EXPECT_EQ(c.upstream.host, "10.0.0.1");
  EXPECT_EQ(c.upstream.port, "3000");
  EXPECT_EQ(c.store.dsn, "postgresql://x@y/z");
}

TEST(ConfigErrors, UnknownKeyIsReportedAtItsPosition) {
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  tll: 24h\n"), "6:3");
  EXPECT_NE(error_of(std::string(kMinimal) + "defaults:\n  tll: 24h\n").find("unknown key \"tll\""),
            std::string::npos);
  EXPECT_EQ(where(std::string(kMinimal) + "listn: 1.2.3.4:5\n"), "5:1");
  EXPECT_EQ(where(std::string(kMinimal) +
                  "routes:\n  - name: a\n    path_prefix: /a\n    key_requird: true\n"),
            "8:5");
}

TEST(ConfigErrors, BadValuesAreReportedAtTheValue) {
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  ttl: forever\n"), "6:8");
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  on_concurrent: queue\n"), "6:18");
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  store_status: [2xx, 7xx]\n"), "6:23");
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  key_required: yes please\n"), "6:17");
  EXPECT_EQ(where(std::string(kMinimal) + "listen: nowhere\n"), "5:9");
}

TEST(ConfigErrors, StoreGrpcStatusTakesNamesAndRefusesTryAgainStatuses) {
  EXPECT_EQ(where(std::string(kMinimal) + "defaults:\n  store_grpc_status: [OK, NOTFOUND]\n"),
            "6:27");
  const auto never =
      error_of(std::string(kMinimal) + "defaults:\n  store_grpc_status: [OK, UNAVAILABLE]\n");
  EXPECT_NE(never.find("UNAVAILABLE is never stored"), std::string::npos) << never;
}

TEST(ConfigErrors, UpstreamProtocolMustFitTheUrl) {
  EXPECT_NE(error_of("upstream:\n  url: https://a:1\n  protocol: h2c\nstore:\n  memory: {}\n")
                .find("h2c is HTTP/2 in cleartext"),
            std::string::npos);
  EXPECT_NE(error_of("upstream:\n  url: http://a:1\n  protocol: auto\nstore:\n  memory: {}\n")
                .find("needs an https:// upstream.url"),
            std::string::npos);
  EXPECT_EQ(where("upstream:\n  url: http://a:1\n  protocol: spdy\nstore:\n  memory: {}\n"),
            "3:13");
}

TEST(ConfigErrors, StoreMustBeExactlyOne) {
  EXPECT_NE(error_of("upstream:\n  url: http://a:1\nstore:\n  memory: {}\n  postgres: {dsn: x}\n")
                .find("exactly one"),
            std::string::npos);
  EXPECT_NE(error_of("upstream:\n  url: http://a:1\nstore: {}\n").find("exactly one"),
            std::string::npos);
}

TEST(ConfigErrors, MissingEnvironmentVariableIsNamed) {
  const auto e = error_of("upstream:\n  url: http://a:1\nstore:\n  postgres:\n    dsn: ${NOPE}\n");
  EXPECT_EQ(e.substr(0, 5), "5:10:");
  EXPECT_NE(e.find("NOPE is not set"), std::string::npos);
}

TEST(ConfigErrors, UpstreamMustBeHttpUrl) {
  EXPECT_NE(error_of("upstream:\n  url: ftp://a\nstore:\n  memory: {}\n").find("http"),
            std::string::npos);
  EXPECT_NE(
      error_of("upstream:\n  url: 'not a url'\nstore:\n  memory: {}\n").find("not a valid URL"),
      std::string::npos);
}

TEST(ConfigErrors, RoutesNeedNamesAndPrefixesAndUniqueNames) {
  EXPECT_NE(error_of(std::string(kMinimal) + "routes:\n  - path_prefix: /a\n").find("needs a name"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) + "routes:\n  - name: a\n").find("path_prefix"),
            std::string::npos);
  EXPECT_NE(error_of(std::string(kMinimal) +
                     "routes:\n  - {name: a, path_prefix: /a}\n  - {name: a, path_prefix: /b}\n")
                .find("duplicate"),
            std::string::npos);
}

TEST(ConfigErrors, YamlSyntaxErrorHasPosition) {
  const auto e = error_of("upstream: [unclosed\n");
  EXPECT_TRUE(e.starts_with("2:1:") || e.starts_with("1:")) << e;
}

TEST(ConfigErrors, TrailingDocumentsAreNotIgnored) {
  // Reported at the second document's "---" line.
  EXPECT_EQ(where("{upstream: {url: 'http://a:1'}, store: {memory: {}}}\n---\nlisten: x\n"), "2:1");
  EXPECT_NE(error_of("{upstream: {url: 'http://a:1'}, store: {memory: {}}}\nbogus: 1\n").size(),
            0u);
}

TEST(ConfigErrors, StrayCommaIsASyntaxErrorNotAHang) {
  // yaml-cpp 0.7's LoadAll loops forever on these; found by fuzz/fuzz_config.cpp.
  for (const char* text : {",", ",x: 1\n", ",isten: x\nstore: 1\n"}) {
    EXPECT_NE(error_of(text).find("not valid YAML"), std::string::npos) << text;
  }
}

TEST(ConfigErrors, NonScalarKeysAreConfigErrors) {
  // Found by fuzz/fuzz_config.cpp: a sequence as a map key escaped as a yaml-cpp throw.
  EXPECT_EQ(where("upstream: { [2xx, 404], scope: {from: header}}\nstore: {memory: {}}\n"), "1:13");
  EXPECT_NE(error_of("{[a]: 1}\n").find("not a plain name"), std::string::npos);
}

TEST(ConfigErrors, EmptyFileIsAnError) { EXPECT_NE(error_of("").find("empty"), std::string::npos); }

TEST(Config, ShippedExampleConfigIsValid) {
  setenv("IDEMPROXY_PG_DSN", "postgresql://postgres@127.0.0.1:5432/idemproxy", 1);
  const Config c = load_config(IDEMPROXY_SOURCE_DIR "/config/idemproxy.yaml");
  ASSERT_EQ(c.routes.size(), 2u);
  EXPECT_EQ(c.routes[0].name, "orders");
  EXPECT_TRUE(c.routes[0].key_required);
  EXPECT_EQ(c.routes[0].ttl, 72h);
  EXPECT_FALSE(c.routes[1].enabled);
}

TEST(Config, MissingFileIsAConfigError) {
  EXPECT_THROW(load_config("/nonexistent/idemproxy.yaml"), ConfigError);
}

TEST(Config, UpstreamBasePathIsKeptWithoutTrailingSlash) {
  EXPECT_EQ(
      parse("upstream: {url: 'http://a:1/api/v2/'}\nstore: {memory: {}}\n").upstream.base_path,
      "/api/v2");
  EXPECT_EQ(parse("upstream: {url: 'http://a:1'}\nstore: {memory: {}}\n").upstream.base_path, "");
  EXPECT_EQ(parse("upstream: {url: 'http://a'}\nstore: {memory: {}}\n").upstream.port, "80");
  EXPECT_NE(error_of("upstream: {url: 'http://a:1/x?y=1'}\nstore: {memory: {}}\n").find("query"),
            std::string::npos);
}

TEST(ConfigReference, EveryAcceptedKeyIsDocumentedInTheReadme) {
  std::ifstream in(IDEMPROXY_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  const std::string readme((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto reference = readme.find("## Configuration reference");
  ASSERT_NE(reference, std::string::npos);
  const std::string section =
      readme.substr(reference, readme.find("\n## ", reference + 1) - reference);
  const auto keys = documented_keys();
  EXPECT_GT(keys.size(), 40u);
  for (const auto& key : keys) {
    EXPECT_NE(section.find("`" + key + "`"), std::string::npos)
        << "config key " << key << " is accepted by the loader but not documented in README.md";
  }
}

// Reload compares and keeps restart-only keys from the same table the loader's
// schema comes from: a key added there cannot be forgotten here.
TEST(ConfigReload, RestartOnlyKeysAreNamedAndKeptAtTheirRunningValues) {
  const std::string base = "upstream: {url: 'http://a:1/base', timeout: 5s}\nstore: {memory: {}}\n";
  const Config running =
      parse("listen: 127.0.0.1:8080\nserver: {threads: 1, read_timeout: 5s}\n" + base);
  Config next = parse(
      "listen: 127.0.0.1:8081\nserver: {threads: 2, read_timeout: 9s}\n"
      "upstream: {url: 'https://b:2', timeout: 7s}\nstore: {memory: {}}\n"
      "replay_cache: {max_bytes: 0}\n");
  const auto changed = restart_only_changes(running, next);
  EXPECT_EQ(changed, (std::vector<std::string>{"listen", "replay_cache.max_bytes", "upstream.url",
                                               "upstream.timeout", "server.threads"}));
  keep_restart_only(next, running);
  EXPECT_TRUE(restart_only_changes(running, next).empty());
  EXPECT_EQ(next.listen.port, 8080);
  EXPECT_EQ(next.upstream.host, "a");
  EXPECT_EQ(next.upstream.port, "1");
  EXPECT_EQ(next.upstream.base_path, "/base");
  EXPECT_FALSE(next.upstream.tls.enabled);
  EXPECT_EQ(next.upstream.timeout, 5s);
  EXPECT_EQ(next.server.threads, 1);
  EXPECT_EQ(next.server.read_timeout, 9s);  // reloadable: the new value stays
  for (const auto& key : changed) {
    const auto keys = documented_keys();
    EXPECT_NE(std::find(keys.begin(), keys.end(), key), keys.end()) << key;
  }
}

TEST(Config, ScopeFromAuthorizationNeedsAKeyAndNeverStoresTheRawHeader) {
  const std::string key32(32, 'k');
  const Config c = parse("scope_key: " + key32 +
                         "\nupstream: {url: 'http://a:1'}\nstore: {memory: {}}\n"
                         "routes:\n  - {name: a, path_prefix: /a, scope: {from: authorization}}\n"
                         "  - {name: b, path_prefix: /b, scope: {from: header, header: X-T}}\n");
  EXPECT_EQ(c.routes[0].scope_from, idemproxy::engine::ScopeFrom::authorization);
  EXPECT_EQ(c.routes[1].scope_header, "X-T");
  const std::string base = "upstream: {url: 'http://a:1'}\nstore: {memory: {}}\n";
  EXPECT_NE(
      error_of(base + "routes:\n  - {name: a, path_prefix: /a, scope: {from: authorization}}\n")
          .find("needs scope_key"),
      std::string::npos);
  EXPECT_NE(
      error_of(
          "scope_key: " + key32 + "\n" + base +
          "routes:\n  - {name: a, path_prefix: /a, scope: {from: authorization, hash: false}}\n")
          .find("never stored"),
      std::string::npos);
  EXPECT_NE(error_of("scope_key: short\n" + base).find("32"), std::string::npos);
  EXPECT_NE(error_of(base + "routes:\n  - {name: a, path_prefix: /a, scope: {from: cookie}}\n")
                .find("header or authorization"),
            std::string::npos);
}

// Issue 10, defect 5: combinations under which a live holder's lease cannot hold.
TEST(ConfigLease, CombinationsThatCannotHoldAreRejectedWithTheirPlace) {
  const std::string base =
      "upstream: {url: http://127.0.0.1:3000}\n"
      "store:\n  postgres: {dsn: postgresql://x/y, statement_timeout: 5s}\n";
  EXPECT_EQ(error_of(base + "defaults: {lease: 500ms}\n"),
            "4:19: defaults.lease must be at least 1s");
  EXPECT_EQ(error_of(base + "routes:\n  - name: o\n    path_prefix: /o\n    lease: 5s\n"),
            "7:12: route \"o\": lease (5000 ms) must be longer than "
            "store.postgres.statement_timeout, which bounds each lease renewal");
  EXPECT_EQ(
      parse(base + "routes:\n  - name: o\n    path_prefix: /o\n    lease: 6s\n").routes.at(0).lease,
      6s);
}

// Issue 22: a lease set in defaults that the default statement_timeout (5s) outlasts
// was reported as yaml-cpp's `invalid node; first invalid key: "lease"` at 1:1 (a Node
// re-assigned in the loader); it is the lease's own error, at the defaults' lease.
TEST(ConfigLease, ALeaseFromDefaultsIsReportedWithItsRealCauseAtItsPlace) {
  const std::string base =
      "upstream: {url: http://127.0.0.1:3000}\n"
      "store:\n  postgres: {dsn: postgresql://x/y}\n";
  EXPECT_EQ(error_of(base + "defaults: {lease: 3s}\nroutes: [{name: o, path_prefix: /o}]\n"),
            "4:19: route \"o\": lease (3000 ms) must be longer than "
            "store.postgres.statement_timeout, which bounds each lease renewal");
  // The same lease on the route itself, with defaults that name other keys.
  EXPECT_EQ(error_of(base + "defaults: {ttl: 1h}\nroutes:\n  - {name: o, path_prefix: /o, "
                            "lease: 3s}\n"),
            "6:39: route \"o\": lease (3000 ms) must be longer than "
            "store.postgres.statement_timeout, which bounds each lease renewal");
  // A scope from a client certificate, set in defaults, without a CA to verify it.
  EXPECT_EQ(error_of(base + "defaults: {scope: {from: client_cert}}\n"
                            "routes: [{name: o, path_prefix: /o}]\n")
                .substr(0, 5),
            "4:19:");
}

// Issue 37: store.postgres.batch_wait, in microseconds or as any other duration, at
// most 100ms; a malformed or too-long wait is reported at its place.
TEST(ConfigStore, BatchWaitTakesMicrosecondsAndIsBounded) {
  const std::string base =
      "upstream: {url: http://127.0.0.1:3000}\n"
      "routes: [{name: o, path_prefix: /o}]\n"
      "store:\n  postgres:\n    dsn: postgresql://x/y\n";
  EXPECT_EQ(parse(base).store.batch_wait, std::chrono::microseconds{1000});  // the default
  EXPECT_EQ(parse(base + "    batch_wait: 250us\n").store.batch_wait,
            std::chrono::microseconds{250});
  EXPECT_EQ(parse(base + "    batch_wait: 2ms\n").store.batch_wait,
            std::chrono::microseconds{2000});
  EXPECT_EQ(error_of(base + "    batch_wait: 101ms\n"),
            "6:17: store.postgres.batch_wait must be at most 100ms");
  EXPECT_EQ(error_of(base + "    batch_wait: 1.5us\n"),
            "6:17: store.postgres.batch_wait: invalid duration \"1.5us\" (e.g. 250us or 1ms)");
  EXPECT_NE(error_of(base + "    batch_wait: soon\n").find("6:17: store.postgres.batch_wait"),
            std::string::npos);
}

// store.postgres.defer_chunk_flush: off unless set; a boolean, reported at its place
// otherwise; a restart-only setting.
TEST(ConfigStore, DeferChunkFlushIsOffUnlessSetAndABoolean) {
  const std::string base =
      "upstream: {url: http://127.0.0.1:3000}\n"
      "routes: [{name: o, path_prefix: /o}]\n"
      "store:\n  postgres:\n    dsn: postgresql://x/y\n";
  EXPECT_FALSE(parse(base).store.defer_chunk_flush);
  EXPECT_TRUE(parse(base + "    defer_chunk_flush: true\n").store.defer_chunk_flush);
  EXPECT_NE(error_of(base + "    defer_chunk_flush: soon\n")
                .find("6:24: store.postgres.defer_chunk_flush"),
            std::string::npos);
  const auto changed =
      restart_only_changes(parse(base), parse(base + "    defer_chunk_flush: true\n"));
  EXPECT_EQ(changed, std::vector<std::string>{"store.postgres.defer_chunk_flush"});
}

TEST(Config, AQuotaCapsEachTenantAndARoutesQuotaReplacesTheDefaults) {
  const Config c = parse(std::string(kMinimal) +
                         "defaults: {quota: {records: 1000, bytes: 1MiB}}\n"
                         "routes:\n  - {name: a, path_prefix: /a}\n"
                         "  - {name: b, path_prefix: /b, quota: {in_flight: 5}}\n");
  EXPECT_EQ(c.routes[0].quota, (idemproxy::store::Quota{1000, 1 << 20, 0}));
  EXPECT_EQ(c.routes[1].quota, (idemproxy::store::Quota{0, 0, 5}));
  EXPECT_FALSE(parse(std::string(kMinimal) + "routes: [{name: a, path_prefix: /a}]\n")
                   .routes[0]
                   .quota.any());
}

TEST(ConfigTypos, AQuotaMustCapSomethingWithCountsAndSizes) {
  const std::string route = std::string(kMinimal) + "routes: [{name: a, path_prefix: /a, quota: ";
  EXPECT_NE(error_of(route + "{}}]\n").find("caps nothing"), std::string::npos);
  EXPECT_NE(error_of(route + "{records: 0}}]\n").find("records must be an integer from 1"),
            std::string::npos);
  EXPECT_NE(error_of(route + "{in_flight: lots}}]\n").find("in_flight must be an integer"),
            std::string::npos);
  EXPECT_NE(error_of(route + "{bytes: 1MB}}]\n").find("bytes"), std::string::npos);
  EXPECT_NE(error_of(route + "{record: 5}}]\n").find("record"), std::string::npos);
  EXPECT_EQ(where(route + "{records: -1}}]\n"), "5:54");  // at the value
}

TEST(ConfigErrors, MaxUnstoredIsASizeOfAtLeastOneMebibyteReportedAtTheValue) {
  EXPECT_EQ(parse(kMinimal).server.max_unstored, std::size_t{64} << 20);
  EXPECT_EQ(parse(std::string(kMinimal) + "server: {max_unstored: 8MiB}\n").server.max_unstored,
            std::size_t{8} << 20);
  EXPECT_EQ(error_of(std::string(kMinimal) + "server:\n  max_unstored: 512KiB\n"),
            "6:17: server.max_unstored must be at least 1MiB");
  EXPECT_EQ(where(std::string(kMinimal) + "server:\n  max_unstored: lots\n"), "6:17");
}

TEST(ConfigErrors, AccessLogBufferAndFlushAreBoundedAndReportedAtTheValue) {
  const Config c =
      parse(std::string(kMinimal) + "log: {access_buffer: 1MiB, access_flush: 250ms}\n");
  EXPECT_EQ(c.log_access_buffer, std::size_t{1} << 20);
  EXPECT_EQ(c.log_access_flush, 250ms);
  EXPECT_EQ(parse(std::string(kMinimal) + "log: {access_buffer: 0}\n").log_access_buffer, 0U);
  const Config defaults = parse(kMinimal);
  EXPECT_EQ(defaults.log_access_buffer, std::size_t{64} << 10);
  EXPECT_EQ(defaults.log_access_flush, 1s);
  EXPECT_EQ(error_of(std::string(kMinimal) + "log:\n  access_buffer: 65MiB\n"),
            "6:18: log.access_buffer must be at most 64MiB (0 writes each line)");
  EXPECT_EQ(where(std::string(kMinimal) + "log:\n  access_buffer: lots\n"), "6:18");
  EXPECT_EQ(error_of(std::string(kMinimal) + "log:\n  access_flush: 0s\n"),
            "6:17: log.access_flush must be from 1ms to 1m");
  EXPECT_EQ(where(std::string(kMinimal) + "log:\n  access_flush: 2m\n"), "6:17");
}
