-- Audit checkpoints signed with the service's key (below), and an index of
-- review_summary that nothing uses (first).

-- review_summary_pending served a query for pending reviews that nothing
-- runs (the runner keeps its own runner_pending table). A rebuild of
-- review_summary copies its indexes under generated names, so every partial
-- index on the live table is dropped, whatever it is called now.
DO $$
DECLARE
	idx regclass;
BEGIN
	FOR idx IN
		SELECT i.indexrelid::regclass FROM pg_index i
		WHERE i.indrelid = 'review_summary'::regclass AND i.indpred IS NOT NULL
	LOOP
		EXECUTE 'DROP INDEX ' || idx::text;
	END LOOP;
END
$$;

-- Signed audit checkpoints (docs/operations.md, "Audit"). Each row is one
-- statement signed with the service's Ed25519 audit key: body is the signed
-- text (api/audit/checkpoint.go gives its format: the heads of the reviews
-- that grew since the checkpoint before, and that checkpoint's digest),
-- signature the Ed25519 signature over it. signed_at and key_id repeat the
-- body's for queries; `audit verify --public-key` trusts only the body.
CREATE TABLE audit_checkpoint (
	seq       bigint PRIMARY KEY CHECK (seq >= 1),
	signed_at timestamptz NOT NULL,
	key_id    text NOT NULL,
	body      bytea NOT NULL,
	signature bytea NOT NULL
);

-- audit_signed_head: the newest signed head of each review, the signer's
-- index for checking that a review still extends what was signed before it
-- signs more. Nothing trusts it for verification.
CREATE TABLE audit_signed_head (
	review_id text PRIMARY KEY,
	seq       bigint NOT NULL,
	revision  bigint NOT NULL CHECK (revision >= 0),
	hash      text NOT NULL,
	digest    text NOT NULL
);
