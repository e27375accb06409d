"""Issue 25: the Grafana dashboard and the alert rules in deploy/, checked by a real
Prometheus (Debian's `prometheus` and `promtool`) scraping a real proxy under load."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request


from harness import free_port, wait_for_execution

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRAFANA = os.path.join(ROOT, "deploy", "grafana")
RULES = os.path.join(ROOT, "deploy", "prometheus")
sys.path.insert(0, GRAFANA)
import dashboard  # noqa: E402  (deploy/grafana/dashboard.py: PANEL_VARIABLES)
import preview  # noqa: E402  (deploy/grafana/preview.py: the panels drawn from Prometheus)

ARTIFACTS = os.environ.get("IDEMPROXY_ARTIFACTS", os.path.join(ROOT, "test-artifacts"))

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"


def panels():
    with open(os.path.join(GRAFANA, "idemproxy.json")) as f:
        board = json.load(f)
    return [p for p in board["panels"] if p["type"] != "row"]


def filled(expr):
    for name, value in dashboard.PANEL_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr


class Prometheus:
    def __init__(self, admin_port):
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="idemproxy-prometheus-")
        shutil.copy(os.path.join(RULES, "idemproxy-alerts.yaml"), self.dir)
        with open(os.path.join(self.dir, "prometheus.yml"), "w") as f:
            json.dump({
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": ["idemproxy-alerts.yaml"],
                "scrape_configs": [{"job_name": "idemproxy",
                                    "static_configs": [{"targets": ["127.0.0.1:%d" % admin_port]}]}],
            }, f)
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [PROMETHEUS, "--config.file=" + os.path.join(self.dir, "prometheus.yml"),
             "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port, "--log.level=warn"],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port, timeout=1)
                return
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("prometheus did not start:\n" + self.read_log())
                time.sleep(0.2)

    def read_log(self):
        with open(os.path.join(self.dir, "prometheus.log"), "rb") as f:
            return f.read().decode(errors="replace")

    def api(self, path, **params):
        url = "http://127.0.0.1:%d/api/v1/%s" % (self.port, path)
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def wait_for_scrapes(self, n, timeout=30):
        """Until `n` scrapes of the proxy have landed (Prometheus begins a few seconds
        after it starts): a load sent before the first would be one flat sample."""
        deadline = time.time() + timeout
        while True:
            got = self.query('count_over_time(up{job="idemproxy"}[1m])')
            if got and float(got[0]["value"][1]) >= n:
                return
            assert time.time() < deadline, (got, self.read_log())
            time.sleep(0.25)

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def test_the_dashboard_json_is_what_its_generator_makes():
    out = subprocess.run([sys.executable, os.path.join(GRAFANA, "dashboard.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = [p["title"] for p in json.load(open(os.path.join(GRAFANA, "idemproxy.json")))["panels"]
            if p["type"] == "row"]
    assert rows == ["Traffic and outcomes", "Latency", "Store", "Records", "Leases",
                    "Errors, memory and connections"]
    for p in panels():
        assert p["targets"] and all(t["expr"] for t in p["targets"]), p["title"]
        assert p["datasource"]["uid"] == "${datasource}"


def test_the_alert_rules_pass_promtool_check_and_their_unit_tests():
    check = subprocess.run([PROMTOOL, "check", "rules", "idemproxy-alerts.yaml"], cwd=RULES,
                           capture_output=True, text=True)
    assert check.returncode == 0 and "SUCCESS: 8 rules found" in check.stdout, check.stdout + check.stderr
    unit = subprocess.run([PROMTOOL, "test", "rules", "idemproxy-alerts.test.yaml"], cwd=RULES,
                          capture_output=True, text=True)
    assert unit.returncode == 0 and "SUCCESS" in unit.stdout, unit.stdout + unit.stderr
    # Every alert has a test where it fires and one where it does not.
    with open(os.path.join(RULES, "idemproxy-alerts.yaml")) as f:
        alerts = re.findall(r"- alert: (\w+)", f.read())
    with open(os.path.join(RULES, "idemproxy-alerts.test.yaml")) as f:
        text = f.read()
    for alert in alerts:
        cases = re.findall(r"alertname: %s\n\s+exp_alerts:( \[\])?" % alert, text)
        assert any(c == " []" for c in cases) and any(c == "" for c in cases), alert
    # and each names a runbook line in docs/OPERATIONS.md
    with open(os.path.join(ROOT, "docs", "OPERATIONS.md")) as f:
        operations = f.read()
    for alert in alerts:
        assert re.search(r"^#+ %s$" % alert, operations, re.M), alert


def test_every_panel_returns_data_from_a_real_prometheus_under_load(make_proxy, upstream, key):
    p = make_proxy(store={"postgres": {"dsn": None, "pool_size": 4}})
    prom = Prometheus(p.admin_port)
    started = time.time()
    try:
        prom.wait_for_scrapes(2)
        sent = {}

        def note(outcome, n=1):
            sent[outcome] = sent.get(outcome, 0) + n

        # Two rounds, scrapes apart: every series then moves between two samples, as
        # under steady traffic (a series born with its final count has no rate).
        for round_ in range(2):
            keys = ["%s-%d-%d" % (key, round_, i) for i in range(10)]
            for k in keys:
                assert p.post("/v1/orders", '{"n": 1}', key=k).status == 201
            note("executed", 10)
            for k in keys[:5]:
                assert p.post("/v1/orders", '{"n": 1}', key=k).header("Idempotent-Replayed") == "true"
            note("replayed", 5)
            for k in keys[:2]:
                assert p.post("/v1/orders", '{"n": 2}', key=k).status == 422
            note("mismatch", 2)
            for _ in range(2):
                assert p.post("/v1/orders", "{}").status == 400
            note("missing_key", 2)
            for _ in range(3):
                assert p.request("GET", "/v1/orders").status == 201  # what the fake answers
            note("passthrough", 3)
            prom.wait_for_scrapes(4 + 2 * round_)
        # One 409 in flight: a second request while the first runs.
        slow = key + "-slow"
        first = []
        t = threading.Thread(target=lambda: first.append(
            p.post("/v1/orders?delay_ms=1500", "{}", key=slow)))
        t.start()
        wait_for_execution(upstream, slow)
        assert p.post("/v1/orders?delay_ms=1500", "{}", key=slow).status == 409
        t.join()
        assert first[0].status == 201
        note("conflict")
        note("executed")
        # An indeterminate record: the upstream resets after reading the request.
        broken = key + "-broken"
        assert p.post("/v1/reset-after-read", "{}", key=broken).status == 502
        assert p.post("/v1/reset-after-read", "{}", key=broken).status == 409
        note("upstream_error")
        note("indeterminate")

        total = sum(sent.values())
        deadline = time.time() + 30
        while True:
            got = prom.query('sum(idemproxy_requests_total{job="idemproxy"})')
            if got and float(got[0]["value"][1]) == total:
                break
            assert time.time() < deadline, (got, total, prom.read_log())
            time.sleep(0.5)
        time.sleep(2.5)  # two more scrapes: every rate() has samples on both sides

        empty = []
        for panel in panels():
            for target in panel["targets"]:
                result = prom.query(filled(target["expr"]))
                # Data is a number: a quantile of no observations is NaN, not data.
                if not any(r["value"][1] not in ("NaN", "+Inf", "-Inf") for r in result):
                    empty.append("%s: %s -> %s" % (panel["title"], target["expr"], result))
                if panel["title"] == "Requests since start, by outcome":
                    counted = {r["metric"]["outcome"]: int(float(r["value"][1])) for r in result}
                    assert counted == sent
        assert not empty, "panels without data:\n" + "\n".join(empty)

        # The rules load in the same Prometheus; the indeterminate record fires its
        # alert, and nothing else fires.
        groups = prom.api("rules")["groups"]
        rules = [r for g in groups for r in g["rules"]]
        assert len(rules) == 8 and all(r["health"] == "ok" for r in rules), rules
        deadline = time.time() + 20
        while True:
            firing = {a["labels"]["alertname"] for a in prom.api("alerts")["alerts"]
                      if a["state"] == "firing"}
            if "IdemproxyIndeterminateRecords" in firing:
                break
            assert time.time() < deadline, firing
            time.sleep(0.5)
        assert firing == {"IdemproxyIndeterminateRecords"}, firing

        # The picture of the dashboard: its panels drawn from this Prometheus
        # (deploy/grafana/preview.py), and a screenshot of them in headless Chromium.
        os.makedirs(ARTIFACTS, exist_ok=True)
        page = os.path.join(ARTIFACTS, "dashboard.html")
        with open(page, "w") as f:
            f.write(preview.render("http://127.0.0.1:%d" % prom.port, int(time.time() - started) + 5))
        with open(page) as f:
            assert "no data" not in f.read()
        shot = os.path.join(ARTIFACTS, "dashboard.png")
        chromium = shutil.which("chromium") or "/usr/bin/chromium"
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1400,2800", "--screenshot=" + shot, "file://" + page],
                       capture_output=True, timeout=60, check=True)
        assert os.path.getsize(shot) > 20000
    finally:
        prom.stop()
