"""The replay cache: completed records replay from memory with no database round
trip; a purge anywhere (another instance, the CLI) reaches every instance's cache;
the store still judges everything the cache cannot answer."""
from harness import problem, raw_exchange, wait_for


def test_replays_come_from_memory_without_touching_the_database(make_proxy, upstream, key):
    p = make_proxy(gc={"interval": "0s"})
    first = p.post("/v1/orders", '{"n": 1}', key=key)
    # Claims and completions, each in a group-commit transaction. (Not the store's timed
    # calls: the upkeep samples the store every 10 s, and a sample made during the
    # replays failed this test in CI.)
    calls = "idemproxy_db_batched_operations_total"
    before = p.metric(calls)
    assert before >= 2  # the first request's claim and completion
    replays = [p.post("/v1/orders", '{"n": 1}', key=key) for _ in range(50)]
    assert all(r.header("Idempotent-Replayed") == "true" and r.body == first.body for r in replays)
    assert p.metric("idemproxy_replay_cache_hits_total") == 50
    assert p.metric(calls) == before  # not one claim, so not one commit
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


def test_the_same_json_in_other_bytes_replays_from_memory_too(make_proxy, upstream, key):
    # The exact bytes replay without fingerprinting; reordered members and other
    # spacing take the fingerprint path, and still need no store call.
    p = make_proxy(gc={"interval": "0s"})
    first = p.post("/v1/orders", '{"a": 1, "b": [1, 2]}', key=key)
    # Claims and completions, as the test above counts them (the store's timed calls
    # count the upkeep's sample too, which under load ended after the first request
    # and failed this test in CI).
    calls = "idemproxy_db_batched_operations_total"
    before = p.metric(calls)
    assert before >= 2  # the first request's claim and completion
    for body in ('{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1}', '{ "b" : [1, 2] , "a" : 1 }'):
        r = p.post("/v1/orders", body, key=key)
        assert r.header("Idempotent-Replayed") == "true" and r.body == first.body
    assert p.metric("idemproxy_replay_cache_hits_total") == 3
    assert p.metric(calls) == before
    # Another target with the same key and body is not the same request.
    assert p.post("/v1/orders/other", '{"a": 1, "b": [1, 2]}', key=key).status == 422
    assert upstream.executions.count(key=key) == 1


def test_the_cache_can_be_turned_off(make_proxy, upstream, key):
    p = make_proxy(extra_top={"replay_cache": {"max_bytes": 0}})
    p.post("/v1/orders", "{}", key=key)
    assert p.post("/v1/orders", "{}", key=key).header("Idempotent-Replayed") == "true"
    assert p.metric("idemproxy_replay_cache_hits_total") == 0
    assert p.metric("idemproxy_replay_cache_entries") == 0


def test_a_replay_from_memory_is_byte_for_byte_the_replay_from_the_record(make_proxy, upstream,
                                                                         key):
    # The cache sends a head serialized once, in one gathered write; a proxy without
    # the cache builds each replay with Beast from the record. Same bytes, for a
    # keep-alive request followed by a closing one on one connection, and for
    # HTTP/1.0 (which the cache answers the slow way).
    cached = make_proxy()
    stored = make_proxy(extra_top={"replay_cache": {"max_bytes": 0}})
    body = '{"amount": 1}'
    assert cached.post("/v1/orders?x=1", body, key=key).status == 201

    def replay(version, connection, request_id):
        return ("POST /v1/orders?x=1 HTTP/%s\r\nHost: api\r\nIdempotency-Key: %s\r\n"
                "Content-Type: application/json\r\nContent-Length: %d\r\n%s"
                "X-Request-Id: %s\r\n\r\n%s" % (version, key, len(body), connection,
                                                 request_id, body)).encode()

    pipelined = replay("1.1", "", "rid-1") + replay("1.1", "Connection: close\r\n", "rid-2")
    http10 = replay("1.0", "", "rid-3")
    for payload in (pipelined, http10):
        from_memory = raw_exchange(cached.port, payload)
        from_record = raw_exchange(stored.port, payload)
        assert from_memory.count(b"Idempotent-Replayed: true") == payload.count(b"POST ")
        assert from_memory == from_record
    assert cached.metric("idemproxy_replay_cache_hits_total") == 3
    assert upstream.executions.count(key=key) == 1
