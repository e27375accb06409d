-- taken_over: this record's current claim took it over from a holder whose lease ran
-- out (on_stale: retake). The claim sets it in its ON CONFLICT clause and returns it,
-- so one INSERT tells what it replaced. That also lets the claim run on Citus as one
-- single-shard statement, which cannot read the row's earlier state in a CTE.
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS taken_over boolean NOT NULL DEFAULT false;
