-- watched: a request on another instance waits for this in-flight record (on_concurrent:
-- wait). The holder's completion, release or indeterminate mark then sends NOTIFY on
-- channel idemproxy_done; unwatched records send nothing, so a commit pays for NOTIFY's
-- queue lock only when someone listens for it. A fast default: no table rewrite.
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS watched boolean NOT NULL DEFAULT false;
