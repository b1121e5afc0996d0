-- Partitioning the ledger, step 2 of 3: validate the bound 0002 added. This
-- scans the ledger once, holding only a SHARE UPDATE EXCLUSIVE lock:
-- appends and reads go on meanwhile.
ALTER TABLE event VALIDATE CONSTRAINT event_seq_bound;
