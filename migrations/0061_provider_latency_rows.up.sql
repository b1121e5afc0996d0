-- provider_latency stored one row a histogram instead of one row a bucket,
-- in the form of migration 0027 (buckets ascending, counts at the same
-- index, histogram_add to add to them): 57 → 9 bytes a review at the scale
-- bench's rate.
-- Owned by the providers projection from its version 2 on, which fills it
-- from the ledger when it rebuilds on start; until then it is empty.
DROP TABLE provider_latency;
CREATE TABLE provider_latency (
	minute        timestamptz NOT NULL,
	content_class text NOT NULL,
	provider      text NOT NULL,
	kind          text NOT NULL,
	buckets       smallint[] NOT NULL,
	counts        integer[] NOT NULL,
	PRIMARY KEY (minute, content_class, provider, kind)
);
