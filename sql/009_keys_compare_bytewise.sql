-- Scopes and keys compare byte by byte (COLLATE "C"). Under the database's own
-- collation every comparison in the primary key went through strcoll (varstr_cmp,
-- pg_newlocale_from_collation, lc_collate_is_c): about 4 % of PostgreSQL's CPU per
-- fresh key on a C.UTF-8 database, more under en_US.UTF-8 (docs/PERFORMANCE.md).
-- Equality, and so every lookup, claim and completion, is unchanged: a deterministic
-- collation never calls two different strings equal. Only the order of the admin
-- views' listings becomes byte order. The column type stays text, so the table is not
-- rewritten; the primary key's index is rebuilt once, under this migration's lock.
-- A table Citus already distributes keeps its collation (Citus does not alter the
-- distribution column); a new one is distributed after this runs.
DO $$
BEGIN
  IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
               WHERE logicalrelid = 'idempotency_records'::regclass) THEN
      RETURN;
    END IF;
  END IF;
  ALTER TABLE idempotency_records
    ALTER COLUMN scope TYPE text COLLATE "C",
    ALTER COLUMN key TYPE text COLLATE "C";
END $$;
