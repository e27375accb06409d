#!/usr/bin/env python3
"""Draws the dashboard's panels from a Prometheus, as a static HTML page (SVG charts).

    python3 deploy/grafana/preview.py PROMETHEUS_URL SECONDS OUT.html

It reads idemproxy.json, asks Prometheus (query_range over the last SECONDS, or an
instant query for stat panels) for every panel's expressions with the variables
filled in as dashboard.PANEL_VARIABLES says, and lays the panels out on the
dashboard's own 24-column grid. Grafana is not packaged for Debian, so this is how the
tests (tests/e2e/test_operators_view.py) picture the dashboard; a screenshot of the
page is kept with the test artefacts and in docs/images/dashboard.png.
"""
import html
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dashboard  # noqa: E402

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def fill(expr):
    for name, value in dashboard.PANEL_VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def ask(base, path, **params):
    url = base.rstrip("/") + "/api/v1/" + path + "?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)["data"]["result"]


def legend(fmt, metric):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: metric.get(m.group(1), ""), fmt).strip()


def number(v, unit):
    v = float(v)
    if unit == "percentunit":
        return "%.0f%%" % (v * 100)
    if unit == "s":
        return "%.1f ms" % (v * 1000) if v < 1 else "%.2f s" % v
    if unit == "bytes":
        return "%.1f MiB" % (v / 1048576)
    return ("%.0f" % v) if abs(v) >= 100 or v == int(v) else ("%.2f" % v)


def chart(series, unit, width=560, height=170):
    points = [(t, v) for s in series for t, v in s["values"]]
    if not points:
        return '<p class="none">no data</p>'
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    lo = min(0.0, min(p[1] for p in points))
    hi = max(p[1] for p in points)
    hi = hi if hi > lo else lo + 1
    x = lambda t: 40 + (t - t0) / max(t1 - t0, 1) * (width - 50)
    y = lambda v: 10 + (1 - (v - lo) / (hi - lo)) * (height - 30)
    out = ['<svg viewBox="0 0 %d %d" width="100%%">' % (width, height),
           '<line x1="40" y1="%d" x2="%d" y2="%d" class="axis"/>' % (y(lo), width - 10, y(lo)),
           '<text x="36" y="%d" class="tick">%s</text>' % (y(hi) + 4, html.escape(number(hi, unit))),
           '<text x="36" y="%d" class="tick">%s</text>' % (y(lo) + 4, html.escape(number(lo, unit)))]
    for i, s in enumerate(series):
        path = " ".join("%.1f,%.1f" % (x(t), y(v)) for t, v in s["values"])
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="1.6"/>'
                   % (path, COLOURS[i % len(COLOURS)]))
    out.append("</svg>")
    keys = "".join('<span><i style="background:%s"></i>%s</span>'
                   % (COLOURS[i % len(COLOURS)], html.escape(s["name"] or "value"))
                   for i, s in enumerate(series))
    return "".join(out) + '<div class="legend">%s</div>' % keys


def render(base, seconds):
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "idemproxy.json")) as f:
        board = json.load(f)
    end = time.time()
    start = end - seconds
    step = max(1, seconds // 120)
    cells = []
    for p in board["panels"]:
        grid = p["gridPos"]
        place = "grid-column: %d / span %d;" % (grid["x"] + 1, grid["w"])
        if p["type"] == "row":
            cells.append('<h2 style="grid-column: 1 / span 24">%s</h2>' % html.escape(p["title"]))
            continue
        unit = p["fieldConfig"]["defaults"].get("unit", "none")
        if p["type"] == "stat":
            values = []
            for t in p["targets"]:
                for r in ask(base, "query", query=fill(t["expr"])):
                    values.append((legend(t["legendFormat"], r["metric"]), r["value"][1]))
            body = "".join('<div class="stat"><b>%s</b><span>%s</span></div>'
                           % (html.escape(number(v, unit)), html.escape(n or "value"))
                           for n, v in values) or '<p class="none">no data</p>'
        else:
            series = []
            for t in p["targets"]:
                for r in ask(base, "query_range", query=fill(t["expr"]), start=start, end=end,
                             step=step):
                    series.append({"name": legend(t["legendFormat"], r["metric"]),
                                   "values": [(float(a), float(b)) for a, b in r["values"]
                                              if b not in ("NaN", "+Inf", "-Inf")]})
            body = chart(series, unit)
        cells.append('<section style="%s"><h3>%s</h3>%s</section>'
                     % (place, html.escape(p["title"]), body))
    return PAGE % {"title": html.escape(board["title"]), "cells": "\n".join(cells),
                   "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(end)),
                   "seconds": seconds}


PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>%(title)s dashboard</title>
<style>
body { margin: 0; padding: 12px 16px; background: #111217; color: #ccccdc;
       font: 13px system-ui, sans-serif; }
header { font-size: 16px; margin-bottom: 8px; }
header small { color: #8e8e9a; margin-left: 8px; }
main { display: grid; grid-template-columns: repeat(24, 1fr); gap: 8px; }
h2 { font-size: 14px; margin: 10px 0 0; color: #fff; }
section { background: #181b1f; border: 1px solid #2c3235; border-radius: 3px; padding: 6px 8px; }
h3 { font-size: 12px; margin: 0 0 4px; color: #d8d9da; font-weight: 500; }
.axis { stroke: #444; }
.tick { fill: #8e8e9a; font-size: 10px; text-anchor: end; }
.legend { display: flex; flex-wrap: wrap; gap: 4px 12px; font-size: 11px; }
.legend i { display: inline-block; width: 10px; height: 3px; margin-right: 4px; vertical-align: middle; }
.stat { display: inline-block; margin: 4px 14px 4px 0; }
.stat b { display: block; font-size: 20px; color: #73bf69; }
.stat span { font-size: 11px; color: #8e8e9a; }
.none { color: #8e8e9a; }
</style></head>
<body><header>%(title)s <small>deploy/grafana/idemproxy.json, drawn by deploy/grafana/preview.py
from Prometheus: the last %(seconds)d s to %(when)s</small></header>
<main>
%(cells)s
</main></body></html>
"""

if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    with open(sys.argv[3], "w") as f:
        f.write(render(sys.argv[1], int(sys.argv[2])))
