"""The command line, the admin endpoints, signals and reload."""
import json
import os
import re
import signal
import time

from harness import BINARY, free_port, post_in_background, request, wait_for, wait_for_execution
import subprocess


def run(*args):
    return subprocess.run([BINARY, *args], capture_output=True, text=True, timeout=30)


def test_version_help_and_usage_errors():
    version = run("--version")
    assert version.returncode == 0
    # Built from a clone, --version names the commit (git describe at configure time).
    assert re.match(r"idemproxy \d+\.\d+\.\d+ \([0-9a-f]{7,}(-dirty)?\)\n$", version.stdout), \
        version.stdout
    assert "usage:" in run("--help").stdout
    for command, words in [("serve", "SIGHUP"), ("migrate", "pending migrations"),
                           ("check-config", "FILE:LINE:COL"), ("gc", "expired"),
                           ("keys show", "Prints one record"), ("keys purge", "Deletes one"),
                           ("keys resolve", "indeterminate"), ("keys list", "newest records"),
                           ("keys", "show     print one record")]:
        out = run(*command.split(), "--help")
        assert out.returncode == 0, (command, out.stderr)
        assert out.stdout.startswith("usage: idemproxy ") and words in out.stdout, out.stdout
    keys = run("keys")
    assert keys.returncode == 2 and "show, purge, resolve or list" in keys.stderr
    bad = run("frobnicate")
    assert bad.returncode == 2 and "unknown command" in bad.stderr
    assert run("keys", "show", "--config", "x.yaml").returncode == 2  # needs --key


def test_check_config_reports_file_line_column(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("upstream: {url: 'http://127.0.0.1:3000'}\nstore: {memory: {}}\n"
                    "routes: [{name: orders, path_prefix: /v1}]\n")
    ok = run("check-config", "--config", str(good))
    assert ok.returncode == 0 and "ok" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstream: {url: 'http://127.0.0.1:3000'}\nstore: {memory: {}}\n"
                   "defaults:\n  ttl: 24h\n  tll: 1h\n")
    out = run("check-config", "--config", str(bad))
    assert out.returncode == 2
    assert out.stderr.startswith("%s:5:3: unknown key \"tll\"" % bad)
    missing = run("check-config", "--config", str(tmp_path / "none.yaml"))
    assert missing.returncode == 2 and "none.yaml:1:1:" in missing.stderr


BASE = "upstream: {url: 'http://127.0.0.1:3000'}\nstore: {memory: {}}\n"
TYPOS = [
    # (what, text after BASE, LINE:COL, words in the message)
    ("no routes", "", "1:1", "no routes"),
    ("duplicate key", "routes: [{name: a, path_prefix: /a}]\nroutes: []\n", "4:1",
     "duplicate key \"routes\""),
    # yaml-cpp marks a value inside [{...}] one column early (at the space before it)
    ("empty methods", "routes: [{name: a, path_prefix: /a, methods: []}]\n", "3:46", "is empty"),
    ("header with a space", "routes: [{name: a, path_prefix: /a, header: Idempotency Key}]\n",
     "3:45", "header field name"),
    ("shadowed route", "routes:\n  - {name: all, path_prefix: /v1}\n"
     "  - {name: orders, path_prefix: /v1/orders}\n", "5:33", "can never match"),
]


def test_check_config_refuses_typos_that_would_leave_requests_unprotected(tmp_path):
    """Issue 12: each of these loaded before, and protected nothing it was meant to."""
    for what, text, where, words in TYPOS:
        path = tmp_path / ("%s.yaml" % what.replace(" ", "-"))
        path.write_text(BASE + text)
        out = run("check-config", "--config", str(path))
        assert out.returncode == 2, (what, out.stdout, out.stderr)
        assert out.stderr.startswith("%s:%s: " % (path, where)), (what, out.stderr)
        assert words in out.stderr, (what, out.stderr)


def test_an_unknown_method_loads_with_a_warning_at_its_place(tmp_path):
    path = tmp_path / "pots.yaml"
    path.write_text(BASE + "routes: [{name: a, path_prefix: /a, methods: [POTS]}]\n")
    out = run("check-config", "--config", str(path))
    assert out.returncode == 0, out.stderr
    # (yaml-cpp marks a flow sequence's item at the separator before it)
    assert "warning: %s:3:47: routes[0].methods: POTS is not a method" % path in out.stderr


def test_a_port_in_use_is_reported_without_library_source_paths(make_proxy, tmp_path):
    first = make_proxy()
    doc = json.loads(open(first.config_path).read())
    doc["admin_listen"] = "127.0.0.1:%d" % free_port()
    path = tmp_path / "clash.yaml"
    path.write_text(json.dumps(doc))  # the same listen port as `first`
    out = run("serve", "--config", str(path), "--no-migrate")
    assert out.returncode == 1
    assert "cannot listen on 127.0.0.1:%d (proxy): Address already in use" % first.port \
        in out.stdout + out.stderr, out.stdout + out.stderr
    assert ".hpp" not in out.stdout + out.stderr and "boost" not in out.stdout + out.stderr


def test_serve_refuses_a_broken_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("upstream: {url: 'http://127.0.0.1:3000'}\nstore: {memory: {}}\nlisten: nope\n")
    out = run("serve", "--config", str(bad))
    assert out.returncode == 2 and ":3:9:" in out.stderr


def test_migrate_is_idempotent(proxy):
    out = proxy.cli("migrate")
    assert out.returncode == 0 and "up to date" in out.stdout


def test_keys_show_and_purge(proxy, upstream, key):
    proxy.post("/v1/orders", "{}", key=key)
    assert proxy.cli("keys", "show", "--key", key).returncode == 0
    purged = proxy.cli("keys", "purge", "--key", key)
    assert purged.returncode == 0 and "purged" in purged.stdout
    assert proxy.cli("keys", "show", "--key", key).returncode == 1
    assert proxy.cli("keys", "purge", "--key", key).returncode == 1
    # Purged: the next request executes again.
    assert proxy.post("/v1/orders", "{}", key=key).header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 2


def test_admin_endpoints_and_request_metrics(proxy, key):
    assert proxy.admin("/healthz").status == 200
    assert proxy.admin("/readyz").status == 200
    proxy.post("/v1/orders", "{}", key=key)
    proxy.post("/v1/orders", "{}", key=key)
    proxy.post("/v1/orders", '{"x": 1}', key=key)
    proxy.post("/v1/orders", "{}")
    proxy.request("GET", "/status")
    # A request is counted once its answer is written, which can be a moment after the
    # client has read it (the TSan stage, 4 I/O threads, once scraped first).
    m = lambda route, o: proxy.wait_metric("idemproxy_requests_total", 1, route=route, outcome=o)
    metrics = proxy.admin("/metrics")
    assert metrics.header("Content-Type").startswith("text/plain; version=0.0.4")
    assert m("orders", "executed") == 1
    assert m("orders", "replayed") == 1
    assert m("orders", "mismatch") == 1
    assert m("orders", "missing_key") == 1
    assert m("-", "passthrough") == 1
    assert proxy.metric("idemproxy_upstream_duration_seconds_count") == 2  # keyed + pass-through
    assert proxy.admin("/nope").status == 404


def test_sigterm_finishes_in_flight_requests_and_exits_0(proxy, upstream, key):
    result = {}
    t = post_in_background(proxy, "/v1/orders?delay_ms=700", key, result)
    wait_for_execution(upstream, key)
    proxy.signal(signal.SIGTERM)
    t.join()
    assert result[key].status == 201
    assert proxy.proc.wait(timeout=10) == 0
    # The in-flight request completed its record before exit.
    import json
    assert json.loads(proxy.cli("keys", "show", "--key", key).stdout)["state"] == "completed"


def test_sighup_reloads_routes_and_rejects_a_bad_file(make_proxy, upstream, key):
    p = make_proxy()
    assert p.post("/v1/orders", "{}").status == 400  # key required
    text = open(p.config_path).read()
    p.write_config(text.replace('"key_required": true', '"key_required": false'))
    p.signal(signal.SIGHUP)
    deadline = time.time() + 5
    while p.post("/v1/orders", "{}").status != 201 and time.time() < deadline:
        time.sleep(0.05)
    assert p.post("/v1/orders", "{}").status == 201
    p.write_config(text.replace('"routes"', '"bogus_key": 1, "routes"', 1))
    p.signal(signal.SIGHUP)
    assert wait_for(lambda: "reload rejected" in p.read_log())
    assert p.post("/v1/orders", "{}").status == 201  # the previous config stays
    assert p.proc.poll() is None


def test_sighup_keeps_restart_only_keys_names_them_and_applies_the_rest(make_proxy, upstream,
                                                                      key):
    """A reload cannot move the upstream (its pool was built at start): the running
    URL stays, the log names what was kept, and reloadable keys still apply."""
    p = make_proxy()
    doc = json.loads(open(p.config_path).read())
    doc["upstream"]["url"] = "http://127.0.0.1:%d" % free_port()  # nothing listens there
    doc["upstream"]["timeout"] = "7s"
    for route in doc["routes"]:
        route["key_required"] = False
    p.write_config(json.dumps(doc))
    p.signal(signal.SIGHUP)
    deadline = time.time() + 5
    while p.post("/v1/orders", "{}").status != 201 and time.time() < deadline:
        time.sleep(0.05)
    assert p.post("/v1/orders", "{}").status == 201  # key_required: false applied...
    assert p.post("/v1/orders", "{}", key=key).status == 201  # ...the upstream is the old one
    assert upstream.executions.count(key=key) == 1
    log = p.read_log()
    assert "reload: upstream.url, upstream.timeout changed" in log, log[-2000:]


def test_sighup_applies_log_level_and_format(make_proxy, key):
    """log.level and log.format are reloadable: a reload turns the access log on, in JSON."""
    p = make_proxy(extra_top={"log": {"level": "warn", "access_flush": "50ms"}})
    assert p.post("/v1/orders", "{}", key=key + "-1").status == 201
    doc = json.loads(open(p.config_path).read())
    doc["log"] = {"level": "info", "format": "json", "access_flush": "50ms"}
    p.write_config(json.dumps(doc))
    p.signal(signal.SIGHUP)
    assert wait_for(lambda: "configuration reloaded" in p.read_log())
    assert p.post("/v1/orders", "{}", key=key + "-2").status == 201

    def access():
        lines = [l for l in p.read_log().splitlines() if l.startswith("{")]
        return [j for j in map(json.loads, lines) if j.get("msg") == "request"]
    assert wait_for(lambda: len(access()) == 1)
    assert access()[0]["status"] == 201  # the request after the reload; none from before
    assert "[access]" not in p.read_log()


def test_memory_store_works_for_local_development(tmp_path, upstream, key):
    port, admin = free_port(), free_port()
    cfg = tmp_path / "mem.yaml"
    cfg.write_text("listen: 127.0.0.1:%d\nadmin_listen: 127.0.0.1:%d\n"
                   "upstream: {url: '%s'}\nstore: {memory: {}}\n"
                   "routes: [{name: orders, path_prefix: /v1}]\n" % (port, admin, upstream.url))
    proc = subprocess.Popen([BINARY, "--config", str(cfg)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                if request(admin, "GET", "/healthz", timeout=1).status == 200:
                    break
            except OSError:
                time.sleep(0.05)
        h = {"Idempotency-Key": key, "Content-Type": "application/json"}
        first = request(port, "POST", "/v1/orders", "{}", h)
        again = request(port, "POST", "/v1/orders", "{}", h)
        assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
        assert upstream.executions.count(key=key) == 1
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def build_profile():
    """The profile the binary's build tree was configured with (cmake/pgo.cmake):
    its digest, or None for a build without one."""
    cache = os.path.join(os.path.dirname(os.path.abspath(BINARY)), "CMakeCache.txt")
    with open(cache) as f:
        entries = dict(re.findall(r"^(IDEMPROXY_PGO(?:_ID)?):\w+=(.*)$", f.read(), re.M))
    return entries.get("IDEMPROXY_PGO_ID") if entries.get("IDEMPROXY_PGO") == "use" else None


def test_the_proxy_names_the_profile_it_was_optimised_by(proxy):
    # scripts/test.sh builds the proxy it tests profile-guided (scripts/pgo.sh) and says
    # so (IDEMPROXY_EXPECT_PGO); the line names the tree's profile, or that it had none.
    profile = build_profile()
    if os.environ.get("IDEMPROXY_EXPECT_PGO") == "1":
        assert profile, "the build tree of %s has no profile (IDEMPROXY_PGO=use)" % BINARY
    started = [line for line in proxy.read_log().splitlines() if " protecting " in line]
    assert len(started) == 1, proxy.read_log()
    if profile:
        assert started[0].endswith("(profile-guided build, profile %s)" % profile), started[0]
    else:
        assert started[0].endswith("(built without a profile)"), started[0]
