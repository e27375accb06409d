"""Encryption at rest: with store.encryption.key_file, a dump of the table shows no
request or response content, replays still work, keys rotate, and a record whose
key is gone is refused rather than replayed or executed again."""
import os
import secrets
import subprocess

from harness import BINARY, problem

CARD = "4242424242424242"


def key_file(tmp_path, name, *lines):
    path = tmp_path / name
    path.write_text("# newest first\n" + "".join(line + "\n" for line in lines))
    os.chmod(path, 0o600)
    return str(path)


def new_key(key_id):
    return "%s:%s" % (key_id, secrets.token_hex(32))


def sealed_store(path):
    return {"postgres": {"dsn": None, "pool_size": 4}, "encryption": {"key_file": path}}


def dump(pg, key):
    return pg.sql("SELECT key_id || ' ' || fingerprint || encode(coalesce(headers, ''), 'escape')"
                  " || encode(coalesce(body, ''), 'escape') FROM idempotency_records"
                  " WHERE key = '%s'" % key)


def test_the_table_holds_no_plaintext_and_replays_still_work(make_proxy, upstream, pg, key,
                                                             tmp_path):
    k1 = new_key("2026-11")
    p = make_proxy(store=sealed_store(key_file(tmp_path, "keys", k1)))
    first = p.post("/v1/echo", '{"card": "%s"}' % CARD, key=key, headers={"X-Card": CARD})
    assert first.status == 200 and CARD.encode() in first.body  # the echo carries it
    again = p.post("/v1/echo", '{"card": "%s"}' % CARD, key=key, headers={"X-Card": CARD})
    assert again.header("Idempotent-Replayed") == "true" and again.body == first.body
    assert upstream.executions.count(key=key) == 1

    row = dump(pg, key)
    assert row.startswith("2026-11 ")
    for plaintext in (CARD, "x-card", "application/json", "body_sha256"):
        assert plaintext not in row.lower(), plaintext
    assert key not in p.read_log() and CARD not in p.read_log()


def test_rotation_keeps_old_records_replayable_and_a_dropped_key_is_refused(
        make_proxy, upstream, pg, key, tmp_path):
    old, new = new_key("2026-05"), new_key("2026-11")
    before = make_proxy(store=sealed_store(key_file(tmp_path, "old", old)))
    first = before.post("/v1/orders", '{"n": 1}', key=key)
    assert first.status == 201
    before.stop()

    rotated = make_proxy(store=sealed_store(key_file(tmp_path, "rotated", new, old)))
    replay = rotated.post("/v1/orders", '{"n": 1}', key=key)
    assert replay.header("Idempotent-Replayed") == "true" and replay.body == first.body
    fresh = key + "-new"
    assert rotated.post("/v1/orders", '{"n": 2}', key=fresh).status == 201
    assert dump(pg, key).startswith("2026-05 ") and dump(pg, fresh).startswith("2026-11 ")
    rotated.stop()

    dropped = make_proxy(store=sealed_store(key_file(tmp_path, "dropped", new)))
    refused = dropped.post("/v1/orders", '{"n": 1}', key=key)
    doc = problem(refused)
    assert refused.status == 500 and doc["type"].endswith("/record-unreadable")
    assert upstream.executions.count(key=key) == 1  # neither replayed nor executed again
    assert dropped.post("/v1/orders", '{"n": 2}', key=fresh).header("Idempotent-Replayed") == "true"
    assert dropped.wait_metric("idemproxy_requests_total", 1, outcome="record_unreadable") == 1
    assert "2026-05" in dropped.read_log()  # the operator is told which key is missing


def test_a_bad_key_file_is_a_config_error_with_its_position(make_proxy, tmp_path):
    bad = key_file(tmp_path, "bad", "k1:" + "ab" * 31)  # 62 hex digits
    p = make_proxy(start=False, store=sealed_store(bad))
    run = subprocess.run([BINARY, "check-config", "--config", p.config_path],
                         capture_output=True, text=True)
    assert run.returncode == 2
    assert run.stderr.startswith(p.config_path + ":"), run.stderr
    assert "line 2: the key must be 64 hex digits" in run.stderr
