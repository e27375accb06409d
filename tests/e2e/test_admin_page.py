"""Issue 25: the admin page (/ui on admin_listen) in a real browser. Debian's chromium,
headless, driven over the DevTools protocol by npm puppeteer-core
(tests/browser/admin_page.js): log in with the token, watch the counters move under
load, find an indeterminate record made by a killed upstream exchange, look it up,
and resolve it. Screenshots go to test-artifacts/."""
import json
import os
import shutil
import subprocess


from harness import request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BROWSER_TESTS = os.path.join(ROOT, "tests", "browser")
ARTIFACTS = os.environ.get("IDEMPROXY_ARTIFACTS", os.path.join(ROOT, "test-artifacts"))
TOKEN = "ui-admin-token-0123456789abcdef"


def test_the_page_is_static_code_under_a_strict_content_security_policy(make_proxy):
    p = make_proxy(extra_top={"admin_token": TOKEN})
    page = request(p.admin_port, "GET", "/ui", http2=False)
    assert page.status == 200 and page.header("Content-Type").startswith("text/html")
    csp = page.header("Content-Security-Policy")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "default-src 'none'" in csp
    assert "frame-ancestors 'none'" in csp and "form-action 'none'" in csp
    assert page.header("X-Content-Type-Options") == "nosniff"
    body = page.body.decode()
    assert '<script src="/ui/app.js"' in body and "<script>" not in body  # no inline script
    assert TOKEN not in body
    script = request(p.admin_port, "GET", "/ui/app.js", http2=False)
    assert script.status == 200 and script.header("Content-Type").startswith("text/javascript")
    assert b"innerHTML" not in script.body  # data is only ever set as text
    assert request(p.admin_port, "GET", "/ui/app.css", http2=False).status == 200
    assert request(p.admin_port, "GET", "/ui/nothing.js", http2=False).status == 404
    # The data behind it needs the token.
    for path in ("/admin/stats", "/admin/policy", "/admin/keys?state=indeterminate"):
        assert request(p.admin_port, "GET", path, http2=False).status == 401


def test_an_operator_resolves_an_indeterminate_record_in_a_real_browser(make_proxy, upstream, key):
    if not os.path.isdir(os.path.join(BROWSER_TESTS, "node_modules", "puppeteer-core")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=BROWSER_TESTS, check=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    p = make_proxy(extra_top={"admin_token": TOKEN})
    env = dict(os.environ, PROXY="http://127.0.0.1:%d" % p.port,
               ADMIN="http://127.0.0.1:%d" % p.admin_port, TOKEN=TOKEN, KEY=key,
               ARTIFACTS=ARTIFACTS, CHROMIUM=chromium)
    run = subprocess.run(["node", os.path.join(BROWSER_TESTS, "admin_page.js")], env=env,
                         capture_output=True, text=True, timeout=180)
    lines = run.stdout.strip().splitlines()
    assert lines, run.stderr
    result = json.loads(lines[-1])
    assert run.returncode == 0 and result["ok"], result.get("error", "") + "\n" + run.stderr
    assert result["policy_route"] == "orders"
    assert result["executed_after"] >= result["executed_before"] + 6 and result["replayed_after"] >= 3
    assert result["lookup"]["state"] == "indeterminate"
    assert result["resolved_state"] == "released"
    assert os.path.getsize(os.path.join(ARTIFACTS, "admin-page.png")) > 10000
    # What the browser did, seen from outside: the record is released, so a retry
    # executes again (the upstream's second execution) and resets again.
    broken = key + "-broken"
    assert p.post("/v1/reset-after-read", "{}", key=broken).status == 502
    assert upstream.executions.count(key=broken) == 2
    # The proxy's log names neither the token nor any key nor a body.
    log = p.read_log()
    assert TOKEN not in log and key not in log
    assert "audit: resolve via the admin API" in log
