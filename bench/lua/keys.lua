-- POSTs with an Idempotency-Key per request. KEY_PREFIX makes keys unique per run;
-- with KEY_SPACE=N the keys cycle through N values (the replay scenario: after the
-- first N requests, every request replays a completed record).
wrk.method = "POST"
wrk.body = '{"amount":1000,"currency":"eur"}'
wrk.headers["Content-Type"] = "application/json"
local prefix = os.getenv("KEY_PREFIX") or "k"
local space = tonumber(os.getenv("KEY_SPACE") or "0")
local counter = 0
request = function()
  counter = counter + 1
  local n = counter
  if space > 0 then n = counter % space end
  return wrk.format(nil, nil, {["Idempotency-Key"] = prefix .. "-" .. n})
end
