-- Per-tenant quotas (a route's `quota`): each scope's usage, kept in the same
-- transactions as the claims, completions and deletions that change it.
--
-- A record claimed on a route with a quota carries the route's caps in `quota`
-- ({records, bytes, in_flight}, 0: no cap); other records have NULL there and are
-- never counted, so a route without a quota pays one NULL test per row, in C.
-- idempotency_usage holds one row per scope claimed under a quota: its counted
-- records, the bytes of their stored answers (headers and body, as stored) and those
-- in flight, beside the caps its latest admitted claim carried (the admin view).
--
-- Triggers keep the usage, so every form of every statement (single, batched,
-- mixed, GC, purges, drop_answers, resolve) counts alike:
-- - before a counted row is inserted: a key new to its scope locks the scope's usage
--   row, so claims of one scope are admitted one at a time, and the cap is exact under
--   concurrency; at a cap the row is skipped (the claim returns no row, and the store
--   reads the usage to say which cap); otherwise records and in_flight go up. A key
--   the scope already has (a retry, a retake) is never refused.
-- - after a counted row changes state or answer: in_flight and bytes follow;
-- - after a counted row is deleted: its share is given back.
--
-- On Citus the records are distributed by key, so a scope's records span workers and
-- no one row can count them in the claim's transaction: the triggers are not created,
-- and the store counts a scope's records before each claim instead (docs/SCALING.md).
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS quota bigint[];

CREATE TABLE IF NOT EXISTS idempotency_usage (
  scope     text COLLATE "C" PRIMARY KEY,
  records   bigint   NOT NULL DEFAULT 0,
  bytes     bigint   NOT NULL DEFAULT 0,
  in_flight bigint   NOT NULL DEFAULT 0,
  quota     bigint[] NOT NULL DEFAULT '{0,0,0}'
);

DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
    RETURN;
  END IF;

  CREATE OR REPLACE FUNCTION idempotency_quota_admit() RETURNS trigger
  LANGUAGE plpgsql AS $f$
  DECLARE
    u idempotency_usage%ROWTYPE;
  BEGIN
    -- A key the scope already has: a retry or a retake, never refused nor counted
    -- again (the update trigger follows its state).
    PERFORM 1 FROM idempotency_records WHERE scope = NEW.scope AND key = NEW.key;
    IF FOUND THEN RETURN NEW; END IF;
    INSERT INTO idempotency_usage (scope) VALUES (NEW.scope) ON CONFLICT (scope) DO NOTHING;
    SELECT * INTO u FROM idempotency_usage WHERE scope = NEW.scope FOR UPDATE;
    -- Looked for again under the scope's lock: a claim of the same key that committed
    -- while this one waited is seen now.
    PERFORM 1 FROM idempotency_records WHERE scope = NEW.scope AND key = NEW.key;
    IF FOUND THEN RETURN NEW; END IF;
    IF (NEW.quota[1] > 0 AND u.records >= NEW.quota[1])
       OR (NEW.quota[2] > 0 AND u.bytes >= NEW.quota[2])
       OR (NEW.quota[3] > 0 AND u.in_flight >= NEW.quota[3]) THEN
      RETURN NULL;
    END IF;
    UPDATE idempotency_usage
       SET records = records + 1, in_flight = in_flight + 1, quota = NEW.quota
     WHERE scope = NEW.scope;
    RETURN NEW;
  END $f$;

  -- What a row adds to its scope's usage: {records, bytes, in_flight}.
  CREATE OR REPLACE FUNCTION idempotency_quota_share(r idempotency_records) RETURNS bigint[]
  LANGUAGE sql IMMUTABLE AS $f$
    SELECT ARRAY[1, coalesce(octet_length(r.headers), 0) + coalesce(octet_length(r.body), 0),
                 (r.state = 'in_flight')::int]::bigint[]
  $f$;

  -- After a counted row changes (NEW is NULL when it was deleted): the difference.
  CREATE OR REPLACE FUNCTION idempotency_quota_follow() RETURNS trigger
  LANGUAGE plpgsql AS $f$
  DECLARE
    before bigint[] := idempotency_quota_share(OLD);
    after bigint[] := CASE WHEN TG_OP = 'DELETE' THEN '{0,0,0}'::bigint[]
                           ELSE idempotency_quota_share(NEW) END;
  BEGIN
    UPDATE idempotency_usage SET records = records + after[1] - before[1],
                                 bytes = bytes + after[2] - before[2],
                                 in_flight = in_flight + after[3] - before[3]
     WHERE scope = OLD.scope;
    RETURN NULL;
  END $f$;

  CREATE TRIGGER idempotency_quota_admit BEFORE INSERT ON idempotency_records
    FOR EACH ROW WHEN (NEW.quota IS NOT NULL) EXECUTE FUNCTION idempotency_quota_admit();
  CREATE TRIGGER idempotency_quota_follow AFTER UPDATE ON idempotency_records
    FOR EACH ROW WHEN (OLD.quota IS NOT NULL AND (OLD.state IS DISTINCT FROM NEW.state
      OR octet_length(OLD.body) IS DISTINCT FROM octet_length(NEW.body)
      OR octet_length(OLD.headers) IS DISTINCT FROM octet_length(NEW.headers)))
    EXECUTE FUNCTION idempotency_quota_follow();
  CREATE TRIGGER idempotency_quota_give_back AFTER DELETE ON idempotency_records
    FOR EACH ROW WHEN (OLD.quota IS NOT NULL) EXECUTE FUNCTION idempotency_quota_follow();
END $$;
