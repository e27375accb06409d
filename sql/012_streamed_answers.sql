-- Streamed answers kept in chunks (issue 44). A record whose answer streamed keeps
-- its status and fields as before, and its body as numbered chunks in
-- idempotency_chunks, written while it streams under the holder's fencing token:
-- - chunks:      how many (NULL: the body, if any, is in the body column);
-- - body_length: the body's length in bytes;
-- - body_digest: its SHA-256 (sealed under store.encryption, as the body is).
-- A record completes with chunks only when exactly that many of its token are stored,
-- so a retry is never replayed a body with a chunk missing.
--
-- A chunk row belongs to (scope, key, token): chunks of a token that no longer holds
-- the record (a takeover, a release, an indeterminate or dropped answer) are never
-- read, and garbage collection deletes them (PgStore::sweep_chunks). key_id names the key that
-- sealed the chunk (NULL in the clear), which binds (scope, key, seq) in.
--
-- On Citus the chunks are distributed by key, co-located with their records, so
-- each chunk statement is a single-shard router query (migrations.cpp). Co-location
-- needs the same collation on the distribution column: the table copies the one
-- idempotency_records has (migration 009 leaves an already distributed table's).
ALTER TABLE idempotency_records
  ADD COLUMN IF NOT EXISTS chunks int,
  ADD COLUMN IF NOT EXISTS body_length bigint,
  ADD COLUMN IF NOT EXISTS body_digest bytea;

DO $$
DECLARE
  scope_collation text;
  key_collation text;
BEGIN
  SELECT quote_ident(c.collname) INTO scope_collation
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
   WHERE a.attrelid = 'idempotency_records'::regclass AND a.attname = 'scope';
  SELECT quote_ident(c.collname) INTO key_collation
    FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation
   WHERE a.attrelid = 'idempotency_records'::regclass AND a.attname = 'key';
  EXECUTE format(
    'CREATE TABLE IF NOT EXISTS idempotency_chunks ('
    ' scope text COLLATE %s NOT NULL, key text COLLATE %s NOT NULL,'
    ' token bigint NOT NULL, seq int NOT NULL, bytes bytea NOT NULL, key_id text,'
    ' PRIMARY KEY (scope, key, token, seq))',
    coalesce(scope_collation, '"default"'), coalesce(key_collation, '"default"'));
  -- Chunks are written once and read in order; compressing them would cost CPU on
  -- every write for answers that are mostly compressed already.
  ALTER TABLE idempotency_chunks ALTER COLUMN bytes SET STORAGE EXTERNAL;

  -- Quotas (migration 011, plain PostgreSQL): a streamed answer's bytes are its body's
  -- length, and a change of its chunks changes its share.
  IF to_regproc('idempotency_quota_share') IS NULL THEN
    RETURN;
  END IF;
  CREATE OR REPLACE FUNCTION idempotency_quota_share(r idempotency_records) RETURNS bigint[]
  LANGUAGE sql IMMUTABLE AS $f$
    SELECT ARRAY[1, coalesce(octet_length(r.headers), 0) + coalesce(octet_length(r.body), 0)
                    + CASE WHEN r.chunks IS NULL THEN 0 ELSE coalesce(r.body_length, 0) END,
                 (r.state = 'in_flight')::int]::bigint[]
  $f$;
  DROP TRIGGER IF EXISTS idempotency_quota_follow ON idempotency_records;
  CREATE TRIGGER idempotency_quota_follow AFTER UPDATE ON idempotency_records
    FOR EACH ROW WHEN (OLD.quota IS NOT NULL AND (OLD.state IS DISTINCT FROM NEW.state
      OR octet_length(OLD.body) IS DISTINCT FROM octet_length(NEW.body)
      OR octet_length(OLD.headers) IS DISTINCT FROM octet_length(NEW.headers)
      OR OLD.chunks IS DISTINCT FROM NEW.chunks
      OR OLD.body_length IS DISTINCT FROM NEW.body_length))
    EXECUTE FUNCTION idempotency_quota_follow();
END $$;
