-- claim_nonce: a random number each claim carries, chosen by the proxy. When a claim's
-- connection breaks before its answer arrives, the proxy cannot tell whether it
-- committed. Sending the same claim again finds its own row by the nonce and takes it
-- (the claim's ON CONFLICT clause); a claim that still cannot be confirmed is
-- withdrawn by its nonce once the database answers again (kWithdraw). Neither can
-- touch another request's claim. NULL on rows written before this migration.
ALTER TABLE idempotency_records ADD COLUMN IF NOT EXISTS claim_nonce bigint;
