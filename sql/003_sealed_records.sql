-- Encryption at rest (store.encryption): the id of the key that sealed the row's
-- fingerprint, headers and body. NULL: stored in the clear.
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS key_id text;
