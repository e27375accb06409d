-- One row per (scope, key). The fencing token changes on every claim, so only the
-- current holder can complete or release the record.
CREATE SEQUENCE IF NOT EXISTS idempotency_fencing_token_seq;

CREATE TABLE IF NOT EXISTS idempotency_records (
  scope        text        NOT NULL,
  key          text        NOT NULL,
  fingerprint  text        NOT NULL,
  state        text        NOT NULL CHECK (state IN ('in_flight', 'completed', 'released')),
  token        bigint      NOT NULL,
  route        text        NOT NULL DEFAULT '',
  method       text        NOT NULL DEFAULT '',
  target       text        NOT NULL DEFAULT '',
  created_at   timestamptz NOT NULL DEFAULT now(),
  locked_until timestamptz,
  expires_at   timestamptz NOT NULL,
  completed_at timestamptz,
  status       integer,
  headers      bytea,
  body         bytea,
  PRIMARY KEY (scope, key)
);

-- GC scans by expiry.
CREATE INDEX IF NOT EXISTS idempotency_records_expires_at_idx
  ON idempotency_records (expires_at);
