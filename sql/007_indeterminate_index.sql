-- Operators watch indeterminate records (the idemproxy_records_indeterminate gauge,
-- docs/OPERATIONS.md): each instance counts them every few seconds. This partial
-- index holds those records only, so the count reads a handful of entries; claims
-- and completions of every other record never touch it.
CREATE INDEX IF NOT EXISTS idempotency_records_indeterminate_idx
  ON idempotency_records (created_at) WHERE state = 'indeterminate';
