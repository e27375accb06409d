-- A POST with a small JSON body and no key: the pass-through scenarios.
wrk.method = "POST"
wrk.body = '{"amount":1000,"currency":"eur"}'
wrk.headers["Content-Type"] = "application/json"
