"""Real clients reading streamed answers through the proxy, and their replays from
chunks (issue 44): Python's httpx streaming, Node's fetch and Chromium's fetch (a
browser's ReadableStream). Each sees events as the upstream sends them, and a 1 MiB
answer replayed from four 256 KiB chunks byte for byte. curl -N and grpcio are in
test_streaming.py, test_oversized.py and test_grpc.py."""
import json
import os
import shutil
import subprocess
import time

import pytest
from harness import run_node

HERE = os.path.dirname(os.path.abspath(__file__))
BROWSER_TESTS = os.path.join(HERE, "..", "browser")
BIG = "/v1/big?bytes=1048576&chunked=1"
EVENTS = "/v1/events?n=5&gap_ms=300"

httpx = pytest.importorskip("httpx")


def httpx_read(port, path, key):
    """Streams one POST with httpx; returns (response, [(seconds, bytes)])."""
    reads = []
    with httpx.Client(timeout=15) as client:
        t0 = time.monotonic()
        with client.stream("POST", "http://127.0.0.1:%d%s" % (port, path), content=b"{}",
                           headers={"Idempotency-Key": key,
                                    "Content-Type": "application/json"}) as r:
            for piece in r.iter_raw():
                reads.append((time.monotonic() - t0, piece))
    return r, reads


def stored_in_chunks(pg, key):
    return pg.sql("SELECT chunks, body_length FROM idempotency_records WHERE key = '%s'" % key)


def test_httpx_streams_the_events_as_they_come_and_a_chunked_replay_whole(
        make_proxy, upstream, pg, key):
    p = make_proxy()
    r, reads = httpx_read(p.port, EVENTS, key)
    assert r.status_code == 200 and "Idempotent-Replayed" not in r.headers
    assert reads[0][0] < 0.9 and reads[-1][0] - reads[0][0] > 0.9, reads
    assert b"".join(x for _, x in reads).count(b"data: token") == 5
    first, first_reads = httpx_read(p.port, BIG, key + "-big")
    again, again_reads = httpx_read(p.port, BIG, key + "-big")
    body = b"".join(x for _, x in first_reads)
    assert len(body) == 1048576
    assert stored_in_chunks(pg, key + "-big") == "4|1048576"
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Content-Length"] == "1048576"
    assert b"".join(x for _, x in again_reads) == body
    assert upstream.executions.count(key=key + "-big") == 1


NODE_DIGEST = r"""
const [url, key] = process.argv.slice(1);
const res = await fetch(url, {method: "POST", body: "{}",
  headers: {"Idempotency-Key": key, "Content-Type": "application/json"}});
const hash = (await import("node:crypto")).createHash("sha256");
let length = 0;
for await (const piece of res.body) { hash.update(piece); length += piece.length; }
console.log(JSON.stringify({status: res.status, length, digest: hash.digest("hex"),
  replayed: res.headers.get("idempotent-replayed")}));
"""


def test_nodes_fetch_reads_a_chunked_replay_whole(make_proxy, upstream, pg, key):
    p = make_proxy()
    url = "http://127.0.0.1:%d%s" % (p.port, BIG)
    first = run_node(NODE_DIGEST, url, key)
    assert stored_in_chunks(pg, key) == "4|1048576"
    again = run_node(NODE_DIGEST, url, key)
    assert first["status"] == again["status"] == 200 and first["length"] == 1048576
    assert first["replayed"] is None and again["replayed"] == "true"
    assert again["digest"] == first["digest"]
    assert upstream.executions.count(key=key) == 1


def test_chromiums_fetch_reads_events_as_they_come_and_a_chunked_replay_whole(
        make_proxy, upstream, pg, key):
    if not os.path.isdir(os.path.join(BROWSER_TESTS, "node_modules", "puppeteer-core")):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                       cwd=BROWSER_TESTS, check=True)
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    p = make_proxy()
    env = dict(os.environ, PROXY="http://127.0.0.1:%d" % p.port, KEY=key, CHROMIUM=chromium)
    run = subprocess.run(["node", os.path.join(BROWSER_TESTS, "stream_reader.js")], env=env,
                         capture_output=True, text=True, timeout=120)
    lines = run.stdout.strip().splitlines()
    assert lines, run.stderr
    result = json.loads(lines[-1])
    assert result["ok"], result.get("error", "") + "\n" + run.stderr
    events = result["events"]
    assert events["status"] == 200 and events["text"].count("data: token") == 5
    # Five events 300 ms apart reach the page in separate reads as they are sent.
    assert events["reads"][0] < 0.9 and events["reads"][-1] - events["reads"][0] > 0.9, events
    big, again = result["big"], result["big_again"]
    assert big["length"] == again["length"] == 1048576
    assert big["replayed"] is None and again["replayed"] == "true"
    assert again["digest"] == big["digest"]
    assert stored_in_chunks(pg, key + "-big") == "4|1048576"
    assert upstream.executions.count(key=key + "-big") == 1
