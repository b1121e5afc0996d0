-- Audit anchors: for each review, the last revision `reviewledger audit
-- verify` found intact and the hash of that event. A later verify checks
-- the stream still holds that event with that hash, which reveals a removed
-- tail, a whole removed stream, or a history rewritten with a recomputed
-- hash chain — none of which the chain alone can show. docs/operations.md
-- ("Audit") describes the limits.
CREATE TABLE audit_anchor (
	review_id   text PRIMARY KEY,
	revision    bigint NOT NULL CHECK (revision >= 0),
	hash        text NOT NULL,
	anchored_at timestamptz NOT NULL
);
