-- indeterminate: the request reached the upstream but its outcome is unknown
-- (timeout or reset after sending, or a response too large to keep).
ALTER TABLE idempotency_records DROP CONSTRAINT IF EXISTS idempotency_records_state_check;
ALTER TABLE idempotency_records ADD CONSTRAINT idempotency_records_state_check
  CHECK (state IN ('in_flight', 'completed', 'released', 'indeterminate'));
