-- The review engine's work records (docs/engine.md): every review on the
-- automated path has one, saying which process holds it and until when
-- (a lease), and when it is next due. The engine's tables are renamed for
-- what they hold.
--
-- review_work (was runner_pending): written with the review's Submitted
-- event and deleted with its last automated event, in the same
-- transaction when the ledger is PostgreSQL. owner_id and lease_until are
-- set while a process works the review (taken before an attempt starts,
-- renewed while it runs); a review waiting (backoff, Retry-After, a
-- callback) is parked: no owner, due_at its next run, awaiting the attempt
-- whose callback it waits for. Processes take due rows with
-- FOR UPDATE SKIP LOCKED, and rows whose lease expired.
ALTER TABLE runner_pending RENAME TO review_work;
ALTER INDEX runner_pending_pkey RENAME TO review_work_pkey;
ALTER INDEX runner_pending_deadline_idx RENAME TO review_work_deadline_idx;
ALTER TABLE review_work
	DROP COLUMN content_class,
	DROP COLUMN created_at,
	ADD COLUMN due_at timestamptz NOT NULL DEFAULT now(),
	ADD COLUMN owner_id text,
	ADD COLUMN lease_until timestamptz,
	ADD COLUMN awaiting integer NOT NULL DEFAULT 0 CHECK (awaiting >= 0),
	ADD CONSTRAINT review_work_lease_check CHECK ((owner_id IS NULL) = (lease_until IS NULL));
ALTER TABLE review_work ALTER COLUMN due_at DROP DEFAULT;
CREATE INDEX review_work_due_idx ON review_work (due_at);
CREATE INDEX review_work_owner_idx ON review_work (owner_id) WHERE owner_id IS NOT NULL;

-- review_payload (was runner_payload): the reviewed content, apart from
-- the events, which carry only its digest.
ALTER TABLE runner_payload RENAME TO review_payload;
ALTER INDEX runner_payload_pkey RENAME TO review_payload_pkey;
ALTER INDEX runner_payload_stored_at_idx RENAME TO review_payload_stored_at_idx;

-- callback_delivery (was runner_webhook): provider callback deliveries
-- seen, and what became of each. A delivery is its webhook-id for its
-- review: the same id naming another review is another delivery.
ALTER TABLE runner_webhook RENAME TO callback_delivery;
ALTER TABLE callback_delivery DROP CONSTRAINT runner_webhook_pkey, ADD PRIMARY KEY (webhook_id, review_id);
ALTER INDEX runner_webhook_received_at_idx RENAME TO callback_delivery_received_at_idx;
