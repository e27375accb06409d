"""/metrics after a scripted sequence, read by Prometheus' own text-format parser."""
import signal
import time

from harness import post_in_background, wait_for_execution, SHORT_STATEMENTS
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
    assert samples[("idemproxy_config_reloads_total", (("result", "ok"),))] == 0
    assert samples[("idemproxy_store_errors_total", ())] == 0


def test_every_metric_family_is_documented(proxy, key):
    import os
    from harness import ROOT
    proxy.post("/v1/orders", "{}", key=key)
    families, _ = scrape(proxy)
    doc = open(os.path.join(ROOT, "docs", "METRICS.md")).read()
    for family in families.values():
        name = family.name + ("_total" if family.type == "counter" else "")
        assert "`%s`" % name in doc, "metric %s is not in docs/METRICS.md" % name
    outcomes = {s.labels["outcome"] for s in families["idemproxy_requests"].samples}
    for outcome in outcomes:
        assert "`%s`" % outcome in doc
