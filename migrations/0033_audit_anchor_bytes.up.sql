-- Audit anchors in fewer bytes: the hash as its 32 bytes (hash_bytes)
-- instead of 64 hex characters (hash), and the fixed-width columns first,
-- so no padding falls between them. A row of a 12-character review ID is
-- 92 bytes with its line pointer instead of 132; an audited ledger keeps
-- one a review.
--
-- The column has a new name so that an auditor of an earlier release,
-- which reads and writes hash as text, fails on it in every query mode
-- rather than read the bytes' text form ('\x…') as a hash that differs
-- from every event's and report every review damaged.
--
-- The table is copied, in the order of its key, and the old one dropped:
-- only `reviewledger audit verify` reads or writes it, and an audit that
-- starts meanwhile waits for the copy (1.2 s for 305,271 anchors: 134 → 93
-- bytes of heap a review). Grants or comments on the old table are not
-- carried over.
ALTER TABLE audit_anchor RENAME TO audit_anchor_hex;
ALTER TABLE audit_anchor_hex RENAME CONSTRAINT audit_anchor_pkey TO audit_anchor_hex_pkey;
CREATE TABLE audit_anchor (
	revision    bigint NOT NULL CHECK (revision >= 0),
	anchored_at timestamptz NOT NULL,
	hash_bytes  bytea NOT NULL CHECK (octet_length(hash_bytes) = 32),
	review_id   text PRIMARY KEY
);
INSERT INTO audit_anchor (revision, anchored_at, hash_bytes, review_id)
SELECT revision, anchored_at, decode(hash, 'hex'), review_id FROM audit_anchor_hex ORDER BY review_id;
DROP TABLE audit_anchor_hex;
-- The reads of a verify are planned from the copy's statistics, not an
-- empty table's.
ANALYZE audit_anchor;
