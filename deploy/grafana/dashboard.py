#!/usr/bin/env python3
"""Writes deploy/grafana/idemproxy.json, the Grafana dashboard, from the panels below.

    python3 deploy/grafana/dashboard.py          rewrite the JSON
    python3 deploy/grafana/dashboard.py --check  exit 1 when the JSON is not what this makes

Edit the panels here, never the JSON: tests/e2e/test_operators_view.py checks that the
two agree, then asks a real Prometheus, scraping a proxy under load, for every panel's
expression (with Grafana's variables filled in as PANEL_VARIABLES says).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "idemproxy.json")

# What the test puts in place of Grafana's variables before it asks Prometheus.
PANEL_VARIABLES = {"$__rate_interval": "1m", "$__range": "10m", "$route": ".*", "$instance": ".*"}

R = '{route=~"$route", instance=~"$instance"}'
I = '{instance=~"$instance"}'


def sel(extra=""):
    """A selector on route and instance, plus `extra` matchers."""
    return '{route=~"$route", instance=~"$instance"%s}' % (", " + extra if extra else "")


REFUSED = ("conflict|mismatch|missing_key|bad_key|too_large|expired|store_unavailable|"
           "indeterminate|outcome_unknown|not_replayable|record_unreadable|bad_request")
FORWARDED = "executed|released|passthrough|fail_open|executed_not_stored"
RATE = "[$__rate_interval]"


def q(expr, legend):
    return {"expr": expr, "legend": legend}


def by_route(outcome_matcher):
    """Requests per second by route with these outcomes; 0 (not "no data") for a route
    that had traffic but none of them, so an absent outcome reads as none."""
    return ("sum by (route) (rate(idemproxy_requests_total%s%s))"
            " or sum by (route) (rate(idemproxy_requests_total%s%s)) * 0"
            % (sel(outcome_matcher), RATE, R, RATE))


# Rows of panels: (title, kind, unit, [queries], description). kind: timeseries or stat.
ROWS = [
    ("Traffic and outcomes", [
        ("Requests by outcome", "timeseries", "reqps", [
            q("sum by (outcome) (rate(idemproxy_requests_total%s%s))" % (R, RATE), "{{outcome}}"),
        ], "Every request, by how it ended (docs/METRICS.md, outcome values)."),
        ("Executed, replayed, refused and unprotected, by route", "timeseries", "reqps", [
            q(by_route('outcome="executed"'),
              "executed {{route}}"),
            q(by_route('outcome="replayed"'),
              "replayed {{route}}"),
            q(by_route('outcome="mismatch"'),
              "mismatch {{route}}"),
            q(by_route('outcome="conflict"'),
              "in flight (409) {{route}}"),
            q(by_route('outcome=~"%s"' % REFUSED),
              "refused {{route}}"),
            q(by_route('outcome="fail_open"'),
              "unprotected (fail_open) {{route}}"),
        ], "The outcomes an operator watches per route. Unprotected requests reached the "
           "upstream without a claim because the store was down and the route fails open."),
        ("Requests since start, by outcome", "stat", "none", [
            q("sum by (outcome) (idemproxy_requests_total%s)" % R, "{{outcome}}"),
        ], "Counts since each instance started; the test checks them against the load it sent."),
        ("Replay ratio", "stat", "percentunit", [
            q('sum(rate(idemproxy_requests_total%s%s)) / sum(rate(idemproxy_requests_total%s%s))'
              % (sel('outcome="replayed"'), RATE, sel('outcome!="passthrough"'), RATE), "replayed"),
        ], "Replays among the requests that carried a key on a covered route."),
    ]),
    ("Latency", [
        ("Latency added by the proxy against the upstream's", "timeseries", "s", [
            q('histogram_quantile(0.99, sum by (le) (rate(idemproxy_request_duration_seconds_bucket%s%s)))'
              % (sel('outcome=~"executed|released"'), RATE), "p99 whole request (executed)"),
            q("histogram_quantile(0.99, sum by (le) (rate(idemproxy_upstream_duration_seconds_bucket%s%s)))"
              % (I, RATE), "p99 upstream"),
            q('sum(rate(idemproxy_request_duration_seconds_sum%s%s)) / sum(rate(idemproxy_request_duration_seconds_count%s%s))'
              ' - sum(rate(idemproxy_upstream_duration_seconds_sum%s%s)) / sum(rate(idemproxy_upstream_duration_seconds_count%s%s))'
              % (sel('outcome=~"%s"' % FORWARDED), RATE, sel('outcome=~"%s"' % FORWARDED), RATE, I, RATE, I, RATE),
              "mean added by the proxy"),
        ], "A forwarded request's time in the proxy against its upstream exchange: the "
           "difference is what idemproxy adds (claim, completion, relay)."),
        ("Replay latency", "timeseries", "s", [
            q('histogram_quantile(0.5, sum by (le) (rate(idemproxy_request_duration_seconds_bucket%s%s)))'
              % (sel('outcome="replayed"'), RATE), "p50 replay"),
            q('histogram_quantile(0.99, sum by (le) (rate(idemproxy_request_duration_seconds_bucket%s%s)))'
              % (sel('outcome="replayed"'), RATE), "p99 replay"),
        ], "Replays never reach the upstream: from the replay cache, or one store read."),
    ]),
    ("Store", [
        ("Store call latency", "timeseries", "s", [
            q("histogram_quantile(0.5, sum by (le) (rate(idemproxy_store_duration_seconds_bucket%s%s)))"
              % (I, RATE), "p50"),
            q("histogram_quantile(0.99, sum by (le) (rate(idemproxy_store_duration_seconds_bucket%s%s)))"
              % (I, RATE), "p99"),
        ], "One claim or completion, from the request's side: queued for group commit until answered."),
        ("Group-commit batch size", "timeseries", "none", [
            q("sum(rate(idemproxy_db_batched_operations_total%s%s)) / sum(rate(idemproxy_db_batches_total%s%s))"
              % (I, RATE, I, RATE), "mean operations per transaction"),
            q("sum(rate(idemproxy_db_batches_total%s%s))" % (I, RATE), "transactions per second"),
        ], "Claims and completions per database transaction."),
        ("Database pool and store errors", "timeseries", "none", [
            q("sum by (state) (idemproxy_db_pool_connections%s)" % I, "{{state}}"),
            q("sum(idemproxy_db_pool_size%s)" % I, "configured"),
            q("sum(rate(idemproxy_store_errors_total%s%s))" % (I, RATE), "store errors per second"),
        ], "Connections open and in use; failed store calls (unreachable, timeout)."),
    ]),
    ("Records", [
        ("In-flight and indeterminate records", "timeseries", "none", [
            q("sum(idemproxy_claims_in_flight%s)" % I, "claims in flight (all instances)"),
            q("max(idemproxy_records_indeterminate%s)" % I, "indeterminate in the store"),
            q("sum(idemproxy_waiting_keys%s)" % I, "keys with waiting retries"),
            q("sum(idemproxy_completions_pending%s)" % I, "completions pending"),
        ], "Indeterminate records need an operator: the admin page (/ui) lists and resolves them."),
        ("Records marked indeterminate", "timeseries", "none", [
            q("sum(increase(idemproxy_indeterminate_marked_total%s%s))" % (I, RATE), "marked"),
        ], "Upstream exchanges that broke after the request was sent."),
    ]),
    ("Leases", [
        ("Lease renewals and takeovers", "timeseries", "none", [
            q("sum(rate(idemproxy_lease_renewals_total%s%s))" % (I, RATE), "renewals per second"),
            q("sum(increase(idemproxy_lease_takeovers_total%s%s))" % (I, RATE), "takeovers"),
        ], "A takeover means a holder stopped renewing: an instance died or stalled mid-request."),
    ]),
    ("Errors, memory and connections", [
        ("Upstream errors", "timeseries", "reqps", [
            q(by_route('outcome=~"upstream_error|record_unreadable"'), "{{route}}"),
        ], "502 and 504 from the upstream, and sealed records that do not open."),
        ("Memory and replay cache", "timeseries", "bytes", [
            q("process_resident_memory_bytes%s" % I, "resident {{instance}}"),
            q("idemproxy_replay_cache_bytes%s" % I, "replay cache {{instance}}"),
            q("idemproxy_replay_cache_max_bytes%s" % I, "replay cache bound {{instance}}"),
        ], "Resident memory, and the replay cache against replay_cache.max_bytes."),
        ("Connections", "timeseries", "none", [
            q("process_open_fds%s" % I, "open fds {{instance}}"),
            q("sum(rate(idemproxy_connections_refused_total%s%s))" % (I, RATE), "refused per second"),
            q("sum(rate(idemproxy_http2_connections_total%s%s))" % (I, RATE), "HTTP/2 connections per second"),
            q("sum(rate(idemproxy_tls_handshake_failures_total%s%s))" % (I, RATE), "TLS failures per second"),
        ], "Descriptors in use (clients, upstream, database), and connections refused at server.max_connections."),
        ("Trace spans dropped", "timeseries", "none", [
            q("sum by (reason) (rate(idemproxy_trace_spans_dropped_total%s%s))" % (I, RATE),
              "dropped per second ({{reason}})"),
            q("sum(rate(idemproxy_trace_spans_exported_total%s%s))" % (I, RATE), "exported per second"),
        ], "Spans recorded but never exported (tracing): queue_full when the tracing backend is "
           "slow, down or failing. Requests never wait for it; they lose their spans instead."),
        ("Build", "stat", "none", [
            q("idemproxy_build_info%s" % I, "{{version}} {{revision}}"),
        ], "The running version and revision, per instance."),
    ]),
]


def panel(pid, title, kind, unit, queries, description, x, y, w, h):
    p = {
        "id": pid,
        "type": kind,
        "title": title,
        "description": description,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "targets": [{"refId": chr(ord("A") + i), "expr": t["expr"], "legendFormat": t["legend"],
                     "datasource": {"type": "prometheus", "uid": "${datasource}"}}
                    for i, t in enumerate(queries)],
    }
    if kind == "stat":
        p["options"] = {"reduceOptions": {"calcs": ["lastNotNull"]}, "textMode": "value_and_name"}
    else:
        p["options"] = {"legend": {"displayMode": "list", "placement": "bottom"},
                        "tooltip": {"mode": "multi"}}
    return p


def dashboard():
    panels = []
    pid = 1
    y = 0
    for row_title, row_panels in ROWS:
        panels.append({"id": pid, "type": "row", "title": row_title, "collapsed": False,
                       "gridPos": {"x": 0, "y": y, "w": 24, "h": 1}, "panels": []})
        pid += 1
        y += 1
        x = 0
        for title, kind, unit, queries, description in row_panels:
            w = 6 if kind == "stat" else 12
            if x + w > 24:
                x = 0
                y += 8
            panels.append(panel(pid, title, kind, unit, queries, description, x, y, w, 8))
            pid += 1
            x += w
        y += 8
    variable = lambda name, query, label: {
        "name": name, "label": label, "type": "query", "query": {"query": query, "refId": name},
        "definition": query, "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "includeAll": True, "allValue": ".*", "multi": True, "refresh": 2,
        "current": {"text": "All", "value": "$__all"}}
    return {
        "title": "idemproxy",
        "uid": "idemproxy",
        "description": "idemproxy: outcomes, replays, latency added, store, records, leases "
                       "(generated by deploy/grafana/dashboard.py)",
        "tags": ["idemproxy"],
        "schemaVersion": 37,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            variable("instance", "label_values(idemproxy_build_info, instance)", "instance"),
            variable("route", "label_values(idemproxy_requests_total, route)", "route"),
        ]},
        "annotations": {"list": []},
        "panels": panels,
    }


def render():
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


if __name__ == "__main__":
    text = render()
    if sys.argv[1:] == ["--check"]:
        with open(OUT) as f:
            same = f.read() == text
        print("dashboard: " + ("up to date" if same else OUT + " differs; run deploy/grafana/dashboard.py"))
        sys.exit(0 if same else 1)
    with open(OUT, "w") as f:
        f.write(text)
    print("dashboard: wrote " + OUT)
