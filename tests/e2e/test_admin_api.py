"""The admin API on admin_listen, behind a bearer token; `idemproxy keys` uses the same code."""
import base64
import hashlib
import json
import time

from harness import request

TOKEN = "s3cret-admin-token-0123456789"


def admin(p, method, path, token=TOKEN):
    headers = {"Authorization": "Bearer " + token} if token is not None else {}
    return request(p.admin_port, method, path, headers=headers)


def token_proxy(make_proxy, **config):
    return make_proxy(extra_top={"admin_token": TOKEN}, **config)


def test_admin_api_refuses_a_missing_or_wrong_token(make_proxy, key):
    p = token_proxy(make_proxy)
    p.post("/v1/orders", "{}", key=key)
    missing = admin(p, "GET", "/admin/keys/" + key, token=None)
    assert missing.status == 401 and missing.header("WWW-Authenticate").startswith("Bearer")
    wrong = admin(p, "GET", "/admin/keys/" + key, token=TOKEN[:-1] + "x")
    assert wrong.status == 401
    assert admin(p, "DELETE", "/admin/keys/" + key, token="short").status == 401
    assert admin(p, "GET", "/admin/keys/" + key).status == 200  # the record is still there
    # probes stay open
    assert request(p.admin_port, "GET", "/healthz").status == 200


def test_admin_api_is_off_without_a_token(proxy, key):
    r = admin(proxy, "GET", "/admin/keys/" + key)
    assert r.status == 403 and "admin_token" in r.json()["detail"]


def test_inspect_list_and_purge_one_record(make_proxy, upstream, key):
    p = token_proxy(make_proxy, defaults={"scope_header": "X-Tenant"})
    p.post("/v1/orders", "{}", key=key, headers={"X-Tenant": "t1"})
    shown = admin(p, "GET", "/admin/keys/%s?scope=t1" % key)
    assert shown.status == 200
    record = shown.json()
    assert record["state"] == "completed" and record["scope"] == "t1"
    assert record["response"]["status"] == 201
    assert admin(p, "GET", "/admin/keys/%s" % key).status == 404  # other scope

    listed = admin(p, "GET", "/admin/keys?state=completed&limit=5").json()
    assert listed["count"] <= 5 and listed["records"][0]["key"] == key
    assert all(r["state"] == "completed" for r in listed["records"])
    assert admin(p, "GET", "/admin/keys?state=bogus").status == 400
    assert admin(p, "GET", "/admin/keys?limit=0").status == 400

    assert admin(p, "DELETE", "/admin/keys/%s?scope=t1" % key).json()["purged"] is True
    assert admin(p, "DELETE", "/admin/keys/%s?scope=t1" % key).status == 404
    again = p.post("/v1/orders", "{}", key=key, headers={"X-Tenant": "t1"})
    assert again.header("Idempotent-Replayed") is None
    assert upstream.executions.count(key=key) == 2


def test_resolve_an_indeterminate_record(make_proxy, upstream, key):
    p = token_proxy(make_proxy)
    assert p.post("/v1/reset-after-read", "{}", key=key).status == 502
    listed = admin(p, "GET", "/admin/keys?state=indeterminate").json()
    assert key in [r["key"] for r in listed["records"]]
    assert admin(p, "POST", "/admin/keys/%s/resolve" % key).json()["state"] == "released"
    assert admin(p, "POST", "/admin/keys/%s/resolve" % key).status == 404  # nothing left to resolve
    assert p.post("/v1/reset-after-read", "{}", key=key).status == 502  # executes again
    assert upstream.executions.count(key=key) == 2


def test_admin_errors_are_problems_with_the_right_status_and_audited(make_proxy, key):
    """Issue 12: 400/405 where 404 was answered, problem+json like the proxy's own
    errors, and an audit line for every purge and resolve (the key only by its hash)."""
    p = token_proxy(make_proxy)
    assert p.post("/v1/orders", "{}", key=key).status == 201
    for method, path, status, allow in [
            ("PUT", "/admin/keys", 405, "GET"),
            ("POST", "/admin/keys/%s" % key, 405, "GET, DELETE"),
            ("GET", "/admin/keys/%s/resolve" % key, 405, "POST"),
            ("GET", "/admin/reload", 405, "POST"),
            ("GET", "/admin/nothing", 404, None),
            ("GET", "/admin/keys?state=bogus", 400, None),
            ("GET", "/admin/keys?limit=x", 400, None)]:
        r = admin(p, method, path)
        assert r.status == status, (method, path, r.status, r.body)
        assert r.header("Content-Type") == "application/problem+json", (path, r.headers)
        problem = r.json()
        assert problem["status"] == status and problem["type"].startswith(
            "https://idemproxy.dev/problems/admin-") and problem["detail"], problem
        assert r.header("Allow") == allow, (path, r.header("Allow"))
    missing = admin(p, "GET", "/admin/keys/none-such")
    assert missing.status == 404 and "no record" in missing.json()["detail"]

    assert admin(p, "DELETE", "/admin/keys/%s" % key).status == 200
    assert admin(p, "DELETE", "/admin/keys/%s" % key).status == 404
    assert admin(p, "POST", "/admin/keys/%s/resolve" % key).status == 404
    time.sleep(0.2)
    log = p.read_log()
    hashed = hashlib.sha256(key.encode()).hexdigest()[:16]
    assert 'audit: purge via the admin API: scope "" key %s: done' % hashed in log, log[-2000:]
    assert 'audit: purge via the admin API: scope "" key %s: not found' % hashed in log
    assert 'audit: resolve via the admin API: scope "" key %s: not found' % hashed in log
    assert key not in [line for line in log.splitlines() if "audit:" in line][0]


def test_keys_with_special_characters_are_addressable(make_proxy, key):
    p = token_proxy(make_proxy)
    odd = key + " /?&=%"
    p.post("/v1/orders", "{}", key=odd)
    from urllib.parse import quote
    shown = admin(p, "GET", "/admin/keys/" + quote(odd, safe=""))
    assert shown.status == 200 and shown.json()["key"] == odd


def test_reload_endpoint_applies_a_good_file_and_rejects_a_bad_one(make_proxy):
    p = token_proxy(make_proxy)
    assert p.post("/v1/orders", "{}").status == 400
    text = open(p.config_path).read()
    p.write_config(text.replace('"key_required": true', '"key_required": false'))
    assert admin(p, "POST", "/admin/reload").json() == {"reloaded": True}
    assert p.post("/v1/orders", "{}").status == 201
    p.write_config(text.replace('"routes"', '"bogus": 1, "routes"', 1))
    bad = admin(p, "POST", "/admin/reload")
    assert bad.status == 400 and "unknown key" in bad.json()["detail"]
    assert p.post("/v1/orders", "{}").status == 201  # the previous config stays
    assert p.metric("idemproxy_config_reloads_total", result="ok") == 1
    assert p.metric("idemproxy_config_reloads_total", result="rejected") == 1


def test_a_reload_reaches_the_next_request_on_a_connection_already_open(make_proxy, key):
    # A connection keeps its configuration between requests while the server's stays
    # the same; a reload must still reach the next request on it (HTTP/1.1) and the
    # next stream (HTTP/2). A covered answer names its record's expiry; with the route
    # disabled the request passes through and its answer does not.
    import http.client
    from h2_peer import Client
    p = token_proxy(make_proxy)
    one = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)
    two = Client(p.port)
    sent = [0]

    def covered():
        sent[0] += 1
        k = "%s-%d" % (key, sent[0])
        one.request("POST", "/v1/orders", body="{}", headers={"Idempotency-Key": k + "-1"})
        r = one.getresponse()
        r.read()
        answer = two.wait(two.request("POST", "/v1/orders", b"{}",
                                      [("idempotency-key", k + "-2")]))[0]
        assert r.status == 201 and answer.status == 201, (r.status, answer.status)
        return (r.getheader("Idempotency-Key-Expires") is not None,
                answer.header("idempotency-key-expires") is not None)

    assert covered() == (True, True)
    kept = one.sock  # the same connection throughout, not one reopened
    text = open(p.config_path).read()
    p.write_config(text.replace('"key_required": true', '"key_required": true, "enabled": false'))
    assert admin(p, "POST", "/admin/reload").json() == {"reloaded": True}
    assert covered() == (False, False)
    p.write_config(text)
    assert admin(p, "POST", "/admin/reload").json() == {"reloaded": True}
    assert covered() == (True, True)
    assert one.sock is kept and two.terminated is None
    one.close()
    two.close()


def test_cli_keys_list_uses_the_same_code(proxy, key):
    proxy.post("/v1/orders", "{}", key=key)
    out = proxy.cli("keys", "list", "--state", "completed", "--limit", "3")
    assert out.returncode == 0, out.stderr
    listed = json.loads(out.stdout)
    assert listed["records"][0]["key"] == key and listed["count"] <= 3
    assert proxy.cli("keys", "list", "--limit", "0").returncode == 2


def test_reload_under_load_fails_no_request_and_drops_no_connection(make_proxy, upstream, key):
    import http.client
    import signal
    import threading
    p = token_proxy(make_proxy)
    text = open(p.config_path).read()
    stop = threading.Event()
    results, errors = [], []

    def client(n):
        conn = http.client.HTTPConnection("127.0.0.1", p.port, timeout=10)  # one keep-alive connection
        i = 0
        while not stop.is_set():
            try:
                conn.request("POST", "/v1/orders", body="{}",
                             headers={"Idempotency-Key": "%s-%d-%d" % (key, n, i)})
                r = conn.getresponse()
                r.read()
                results.append(r.status)
            except Exception as e:  # a dropped connection would land here
                errors.append(repr(e))
                return
            i += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for i in range(12):
        ttl = "%dh" % (i + 1)
        p.write_config(text.replace('"routes"', '"defaults": {"ttl": "%s"}, "routes"' % ttl, 1)
                       if '"defaults": {}' not in text else
                       text.replace('"defaults": {}', '"defaults": {"ttl": "%s"}' % ttl))
        if i % 2:
            p.signal(signal.SIGHUP)
        else:
            assert admin(p, "POST", "/admin/reload").status == 200
        time.sleep(0.1)
    stop.set()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) > 50 and set(results) == {201}
    # The last reload was a SIGHUP, applied on its own time.
    assert p.wait_metric("idemproxy_config_reloads_total", 12, result="ok") == 12
    assert p.proc.poll() is None


def test_curl_sees_the_admin_apis_answers_as_a_real_client(make_proxy, key):
    """The same answers through curl (a real client, not the harness's own): a 401
    with its Bearer challenge (RFC 6750 3), a 405 with Allow (RFC 9110 15.5.6), and a
    purge that a second curl sees gone."""
    from peers import curl
    p = token_proxy(make_proxy)
    assert p.post("/v1/orders", "{}", key=key).status == 201
    base = "http://127.0.0.1:%d" % p.admin_port
    status, headers, body, _ = curl(base + "/admin/keys/" + key)
    assert status == 401 and headers["www-authenticate"].startswith("Bearer realm=")
    assert headers["content-type"] == "application/problem+json"
    auth = ["-H", "Authorization: Bearer " + TOKEN]
    status, headers, body, _ = curl(*auth, "-X", "PUT", base + "/admin/keys")
    assert status == 405 and headers["allow"] == "GET" and json.loads(body)["status"] == 405
    status, _, body, _ = curl(*auth, base + "/admin/keys/" + key)
    assert status == 200 and json.loads(body)["state"] == "completed"
    status, _, _, _ = curl(*auth, "-X", "DELETE", base + "/admin/keys/" + key)
    assert status == 200
    status, _, body, _ = curl(*auth, base + "/admin/keys/" + key)
    assert status == 404 and "no record" in json.loads(body)["detail"]


def test_a_stored_body_is_shown_only_when_asked_and_never_for_a_sealed_record(
        make_proxy, upstream, key, tmp_path):
    """Issue 25: the admin page's lookup. `body=1` adds the stored body (UTF-8 as text,
    other bytes in base64); a record sealed by store.encryption keeps it withheld."""
    p = token_proxy(make_proxy)
    assert p.post("/v1/orders", '{"n": 1}', key=key).status == 201
    plain = admin(p, "GET", "/admin/keys/%s" % key).json()
    assert plain["sealed"] is False and "body" not in plain["response"]
    shown = admin(p, "GET", "/admin/keys/%s?body=1" % key).json()
    assert json.loads(shown["response"]["body"])["key"] == key
    binary = key + "-bin"
    assert p.post("/v1/big?bytes=64", "{}", key=binary).status == 200
    raw = admin(p, "GET", "/admin/keys/%s?body=1" % binary).json()["response"]
    assert "body" not in raw and len(base64.b64decode(raw["body_base64"])) == 64

    from test_encryption import key_file, new_key, sealed_store
    sealed_proxy = make_proxy(extra_top={"admin_token": TOKEN},
                              store=sealed_store(key_file(tmp_path, "keys", new_key("k1"))))
    sealed = key + "-sealed"
    # A marker no hex key, trace id or date can contain (a bare "4242" once matched the key).
    card = "card-number-not-in-hex"
    assert sealed_proxy.post("/v1/orders", '{"card": "%s"}' % card, key=sealed).status == 201
    record = admin(sealed_proxy, "GET", "/admin/keys/%s?body=1" % sealed).json()
    assert record["sealed"] is True and record["response"]["status"] == 201
    assert "body" not in record["response"] and "body_base64" not in record["response"]
    assert "sealed with key \"k1\"" in record["body_withheld"]
    assert card not in json.dumps(record)
