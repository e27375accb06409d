-- Each completed record keeps the end of its answer's replay window. The upstream may
-- set one answer's retention (Idempotency-Policy: max-age=N) within the route's
-- max_ttl, so the window is no longer the route's ttl for every record: with
-- after_expiry: reject the tombstone starts at this record's own window's end, and GC
-- drops the answer then. NULL for records completed before this column: the route's
-- ttl decides for them, as before. Adding a nullable column rewrites nothing.
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS replay_until timestamptz;
