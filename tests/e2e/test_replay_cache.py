"""The replay cache: completed records replay from memory with no database round
trip; a purge anywhere (another instance, the CLI) reaches every instance's cache;
the store still judges everything the cache cannot answer."""
import time

from harness import problem, wait_for

COMMITS = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"


def commits(pg):
    time.sleep(1.2)  # PostgreSQL publishes transaction counts within a second
    return int(pg.sql(COMMITS))


def test_replays_come_from_memory_without_touching_the_database(make_proxy, upstream, pg, key):
    p = make_proxy(gc={"interval": "0s"})
    first = p.post("/v1/orders", '{"n": 1}', key=key)
    before = commits(pg)
    replays = [p.post("/v1/orders", '{"n": 1}', key=key) for _ in range(50)]
    spent = commits(pg) - before
    assert all(r.header("Idempotent-Replayed") == "true" and r.body == first.body for r in replays)
    assert p.metric("idemproxy_replay_cache_hits_total") == 50
    assert spent <= 3, spent  # the psql probe itself, and background noise; not 50
    assert upstream.executions.count(key=key) == 1


def test_a_purge_anywhere_reaches_every_instance_cache(make_proxy, upstream, key):
    a = make_proxy()
    b = make_proxy()
    a.post("/v1/orders", "{}", key=key)
    assert a.post("/v1/orders", "{}", key=key).header("Idempotent-Replayed") == "true"
    assert a.metric("idemproxy_replay_cache_entries") >= 1
    assert b.cli("keys", "purge", "--key", key).returncode == 0  # the CLI, via b's config
    assert wait_for(lambda: a.metric("idemproxy_replay_cache_entries") == 0)
    again = a.post("/v1/orders", "{}", key=key)
    assert again.status == 201 and again.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 2


def test_another_body_with_a_cached_key_is_still_judged_by_the_store(make_proxy, upstream, key):
    p = make_proxy()
    p.post("/v1/orders", '{"n": 1}', key=key)
    assert p.post("/v1/orders", '{"n": 1}', key=key).header("Idempotent-Replayed") == "true"
    r = p.post("/v1/orders", '{"n": 2}', key=key)
    assert r.status == 422 and problem(r)["type"].endswith("/key-mismatch")


def test_the_cache_can_be_turned_off(make_proxy, upstream, key):
    p = make_proxy(extra_top={"replay_cache": {"max_bytes": 0}})
    p.post("/v1/orders", "{}", key=key)
    assert p.post("/v1/orders", "{}", key=key).header("Idempotent-Replayed") == "true"
    assert p.metric("idemproxy_replay_cache_hits_total") == 0
    assert p.metric("idemproxy_replay_cache_entries") == 0
