-- A stored answer's trailer fields (RFC 9110 6.5) are kept apart from its head's, in
-- the same block: the head's "Name: value" lines, then an empty line and the
-- trailers' (src/store/record.cpp). Rows written before this keep their form: a gRPC
-- answer there names its trailers in an Idemproxy-Trailers field among the head's,
-- and the reader moves them out, so those records replay as they did.
COMMENT ON COLUMN idempotency_records.headers IS
  'the stored answer''s head fields as lines "Name: value\r\n", then, when it has any, an empty line and its trailer fields; sealed under key_id when set';
