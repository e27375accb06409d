"""Startup before the database (issue 12): `serve` with PostgreSQL unreachable keeps
running, answers /healthz, says 503 on /readyz, retries with backoff, and becomes
ready when a real PostgreSQL appears on the DSN's port, with no restart."""
import os
import shutil
import subprocess
import tempfile
import time

from harness import ROOT, free_port, problem


def pg_script(*args):
    return subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg.sh"), *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def wait_until(predicate, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def test_serve_starts_before_postgres_and_becomes_ready_without_a_restart(
        make_proxy, upstream, key):
    port = free_port()
    p = make_proxy(dsn="postgresql://postgres@127.0.0.1:%d/idemproxy" % port)
    assert p.admin("/healthz").status == 200
    not_ready = p.admin("/readyz")
    assert not_ready.status == 503
    assert b"store not ready" in not_ready.body and b"refused" in not_ready.body
    refused = p.post("/v1/orders", "{}", key=key)
    assert refused.status == 503
    assert problem(refused)["type"].endswith("/store-unavailable")
    assert upstream.executions.count(key=key) == 0

    pgdir = tempfile.mkdtemp(prefix="idemproxy-late-pg-")
    try:
        pg_script("start", pgdir, str(port), "-c", "fsync=off")
        assert wait_until(lambda: p.admin("/readyz").status == 200, 20), p.read_log()[-2000:]
        first = p.post("/v1/orders", '{"n": 1}', key=key)
        assert first.status == 201 and first.header("Idempotent-Replayed") is None
        again = p.post("/v1/orders", '{"n": 1}', key=key)
        assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
        assert p.post("/v1/orders", '{"n": 2}', key=key).status == 422
        assert upstream.executions.count(key=key) == 1
        log = p.read_log()
        assert "store: not ready (attempt 1):" in log and "(attempt 2):" in log
        assert "retrying in 250 ms" in log and "retrying in 500 ms" in log
        assert "store: ready after" in log and "migration applied" in log
        assert p.proc.poll() is None  # the same process throughout
    finally:
        subprocess.run(["bash", os.path.join(ROOT, "scripts", "pg.sh"), "stop", pgdir],
                       capture_output=True)
        shutil.rmtree(pgdir, ignore_errors=True)


def dead_dsn():
    return "postgresql://postgres@127.0.0.1:%d/idemproxy" % free_port()


def test_readyz_is_ready_without_the_store_when_every_route_fails_open(make_proxy):
    p = make_proxy(dsn=dead_dsn(), defaults={"store_unavailable": "fail_open"},
                   routes=[{"name": "orders", "path_prefix": "/v1"},
                           {"name": "audit", "path_prefix": "/audit", "mode": "shadow",
                            "store_unavailable": "fail_closed"},
                           {"name": "off", "path_prefix": "/off", "enabled": False,
                            "store_unavailable": "fail_closed"}])
    r = p.admin("/readyz")
    assert r.status == 200, r.body
    assert b"without idempotency protection" in r.body and b"store not ready" in r.body


def test_readyz_is_503_without_the_store_when_one_route_fails_closed(make_proxy):
    p = make_proxy(dsn=dead_dsn(), defaults={"store_unavailable": "fail_open"},
                   routes=[{"name": "orders", "path_prefix": "/v1"},
                           {"name": "pay", "path_prefix": "/pay",
                            "store_unavailable": "fail_closed"}])
    assert p.admin("/readyz").status == 503


def test_readyz_follows_a_reload_that_makes_every_route_fail_open(make_proxy):
    p = make_proxy(dsn=dead_dsn(), args=("--no-migrate",))
    assert p.admin("/readyz").status == 503
    text = open(p.config_path).read().replace('"defaults": {}',
                                              '"defaults": {"store_unavailable": "fail_open"}')
    assert "fail_open" in text
    p.write_config(text)
    p.proc.send_signal(1)  # SIGHUP
    assert wait_until(lambda: p.admin("/readyz").status == 200, 5), p.read_log()[-2000:]
