"""/metrics after a scripted sequence, read by Prometheus' own text-format parser."""
import json
import os
import signal
import subprocess
import time

from harness import BINARY, post_in_background, wait_for_execution, SHORT_STATEMENTS
from prometheus_client.parser import text_string_to_metric_families


def scrape(proxy):
    text = proxy.admin("/metrics").body.decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # raises on bad syntax
    samples = {}
    for family in families.values():
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return families, samples


def test_metrics_after_a_scripted_sequence(make_proxy, upstream, key):
    p = make_proxy(defaults={"lease": "1s", "on_stale": "retake", "max_body": "1KiB"},
                   store=SHORT_STATEMENTS)
    p.post("/v1/orders", "{}", key=key)                       # executed
    p.post("/v1/orders", "{}", key=key)                       # replayed
    p.post("/v1/orders", '{"x": 1}', key=key)                 # mismatch
    p.post("/v1/orders", "{}")                                # missing_key
    p.post("/v1/orders", "{}", key="")                        # bad_key
    p.post("/v1/orders", "x" * 2048, key=key + "-big")        # too_large
    p.post("/v1/orders?status=503", "{}", key=key + "-503")   # released
    p.request("GET", "/status")                               # passthrough
    slow = key + "-slow"                                      # conflict, then a takeover
    # The holder is another instance, frozen mid-request: a live holder renews its
    # lease, so only one that stopped running can lose it.
    frozen = make_proxy(defaults={"lease": "1s", "on_stale": "retake"}, store=SHORT_STATEMENTS)
    t = post_in_background(frozen, "/v1/orders?delay_ms=1800", slow, {})
    wait_for_execution(upstream, slow)
    frozen.signal(signal.SIGSTOP)
    p.post("/v1/orders?delay_ms=1800", "{}", key=slow)        # conflict (lease still running)
    time.sleep(1.1)
    p.post("/v1/orders?delay_ms=10", "{}", key=slow + "-x")   # executed
    taken = p.post("/v1/orders?delay_ms=1800", "{}", key=slow)  # lease over: retake
    assert taken.status == 201
    frozen.signal(signal.SIGCONT)
    t.join()

    # `taken` is counted after its answer is sent (src/proxy/serve.cpp, Proxy::serve).
    assert p.wait_metric("idemproxy_requests_total", 3, route="orders", outcome="executed") == 3
    families, samples = scrape(p)
    req = lambda outcome, route="orders": samples[
        ("idemproxy_requests_total", (("outcome", outcome), ("route", route)))]
    assert families["idemproxy_requests"].type == "counter"
    assert req("executed") == 3  # key, slow-x, slow (retaken); the first slow ran on `frozen`
    assert req("replayed") == 1
    assert req("mismatch") == 1
    assert req("missing_key") == 1
    assert req("bad_key") == 1
    assert req("too_large") == 1
    assert req("released") == 1
    assert req("conflict") == 1
    assert req("passthrough", route="-") == 1
    assert samples[("idemproxy_lease_takeovers_total", ())] == 1
    assert samples[("idemproxy_claims_in_flight", ())] == 0
    assert families["idemproxy_upstream_duration_seconds"].type == "histogram"
    assert samples[("idemproxy_upstream_duration_seconds_count", ())] == 5
    assert samples[("idemproxy_upstream_duration_seconds_bucket", (("le", "+Inf"),))] == 5
    assert samples[("idemproxy_store_duration_seconds_count", ())] >= 10
    assert samples[("idemproxy_db_pool_size", ())] == 4
    assert 1 <= samples[("idemproxy_db_pool_connections", (("state", "open"),))] <= 4
    assert samples[("idemproxy_db_pool_connections", (("state", "in_use"),))] <= 4
    assert samples[("idemproxy_completions_pending", ())] == 0
    assert samples[("idemproxy_gc_deleted_total", ())] == 0
    assert samples[("idemproxy_gc_tombstoned_total", ())] == 0
    assert samples[("idemproxy_gc_chunks_swept_total", ())] == 0
    assert samples[("idemproxy_config_reloads_total", (("result", "ok"),))] == 0
    assert samples[("idemproxy_store_errors_total", ())] == 0


def test_every_metric_family_is_documented(proxy, key):
    import os
    from harness import ROOT
    proxy.post("/v1/orders", "{}", key=key)
    assert proxy.wait_metric("idemproxy_requests_total", 1, route="orders",
                             outcome="executed") == 1
    families, _ = scrape(proxy)
    doc = open(os.path.join(ROOT, "docs", "METRICS.md")).read()
    for family in families.values():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert "`%s`" % name in doc, "metric %s is not in docs/METRICS.md" % name
    outcomes = {s.labels["outcome"] for s in families["idemproxy_requests"].samples}
    for outcome in outcomes:
        assert "`%s`" % outcome in doc


def test_request_duration_by_route_and_outcome_reaches_the_upstream_timeout(make_proxy, key):
    p = make_proxy()  # the harness sets upstream.timeout: 10s
    p.post("/v1/orders", "{}", key=key)
    p.post("/v1/orders", "{}", key=key)
    p.post("/v1/orders?delay_ms=300", "{}", key=key + "-slow")
    assert p.wait_metric("idemproxy_requests_total", 2, route="orders", outcome="executed") == 2
    families, samples = scrape(p)
    h = families["idemproxy_request_duration_seconds"]
    assert h.type == "histogram"
    executed = (("outcome", "executed"), ("route", "orders"))
    assert samples[("idemproxy_request_duration_seconds_count", executed)] == 2
    assert samples[("idemproxy_request_duration_seconds_count",
                    (("outcome", "replayed"), ("route", "orders")))] == 1
    assert samples[("idemproxy_request_duration_seconds_sum", executed)] >= 0.3
    bounds = sorted(float(s.labels["le"]) for s in h.samples
                    if s.name.endswith("_bucket") and s.labels["outcome"] == "executed")
    assert bounds[-2:] == [10.0, float("inf")] and 0.001 in bounds
    le = lambda v: samples[("idemproxy_request_duration_seconds_bucket",
                            tuple(sorted(dict(executed, le=v).items())))]
    assert le("0.25") == 1 and le("0.5") == 2  # the 0.3 s request is in (0.25, 0.5]

    slow = make_proxy()
    text = open(slow.config_path).read().replace('"timeout": "10s"', '"timeout": "45s"')
    slow.kill()
    slow.write_config(text)
    slow.start()
    slow.post("/v1/orders", "{}", key=key + "-45")
    assert slow.wait_metric("idemproxy_requests_total", 1, route="orders",
                            outcome="executed") == 1
    families, _ = scrape(slow)
    bounds = [float(s.labels["le"]) for s in families["idemproxy_request_duration_seconds"].samples
              if s.name.endswith("_bucket")]
    assert bounds[-4:] == [15.0, 30.0, 45.0, float("inf")]


def test_build_info_and_process_metrics(proxy):
    families, samples = scrape(proxy)
    info = families["idemproxy_build_info"]  # a gauge in the 0.0.4 text format
    labels = info.samples[0].labels
    version = subprocess.run([BINARY, "--version"], capture_output=True, text=True).stdout
    assert info.samples[0].value == 1 and labels["version"] in version
    assert labels["revision"] and labels["revision"] in version
    pid = proxy.proc.pid
    rss_kib = int([l for l in open("/proc/%d/status" % pid) if l.startswith("VmRSS")][0].split()[1])
    assert abs(samples[("process_resident_memory_bytes", ())] - rss_kib * 1024) < 64 << 20
    fds = len(os.listdir("/proc/%d/fd" % pid))
    assert abs(samples[("process_open_fds", ())] - fds) <= 4
    assert samples[("process_max_fds", ())] > 0
    assert time.time() - 60 < samples[("process_start_time_seconds", ())] <= time.time()
    assert 0 <= samples[("process_cpu_seconds_total", ())] < 60  # in 10 ms ticks: may be 0
    assert families["process_cpu_seconds"].type == "counter"
    assert samples[("process_virtual_memory_bytes", ())] >= samples[("process_resident_memory_bytes", ())]


def test_request_duration_starts_when_the_request_arrives_not_when_the_connection_idles(
        make_proxy, key):
    # A keep-alive client that pauses between requests: the pause is the connection's
    # idle time, not the next request's. (A request's clock once started before the
    # wait for it, so each request after a pause was counted as taking the pause.)
    import http.client
    p = make_proxy(extra_top={"log": {"format": "json"}})
    conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    for i, pause in enumerate((0, 1.2, 1.2)):
        time.sleep(pause)
        conn.request("POST", "/v1/orders", body="{}", headers={"Idempotency-Key": "%s-%d" % (key, i)})
        r = conn.getresponse()
        r.read()
        assert r.status == 201
    for pause in (0, 1.2):  # pass-through, after a pause too
        time.sleep(pause)
        conn.request("GET", "/status")
        conn.getresponse().read()
    conn.close()
    _, samples = scrape(p)
    executed = (("outcome", "executed"), ("route", "orders"))
    assert samples[("idemproxy_request_duration_seconds_count", executed)] == 3
    assert samples[("idemproxy_request_duration_seconds_sum", executed)] < 0.5
    p.stop()
    access = [json.loads(l) for l in p.read_log().splitlines()
              if l.strip() and json.loads(l).get("msg") == "request"]
    assert len(access) == 5
    assert all(a["duration_ms"] < 500 for a in access), [a["duration_ms"] for a in access]
