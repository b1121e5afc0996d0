-- The SLO histograms stored one row a histogram instead of one row a
-- bucket (docs/projections.md, "Histograms in one row"): slo_latency and
-- slo_attempt, and their hourly rollups, hold for each key (class and
-- minute or hour, and the outcome of an attempt) the buckets that counted
-- something, in order, and their counts:
--   buckets: the bucket numbers (projections/histogram.go), ascending,
--            each once;
--   counts:  the count of each, at the same index, every one above zero.
-- A minute of one class held about 13 bucket rows of some 70 bytes
-- (1,282,173 rows for 100,857 class-minutes at 3,000,000 reviews) and as
-- many primary key entries; it is now one row and one entry (the three
-- histogram tables 188 → 33 bytes a review at 3,000,000 reviews, the scale
-- bench's 60 reviews a minute). Reads unnest the arrays into (bucket, n) rows;
-- writes add a batch's counts to a row's with histogram_add.
--
-- Owned by the slo projection from its version 6 on, which fills them
-- from the ledger when it rebuilds on start; until then they are empty.

-- histogram_add returns the bucket-wise sum of two histograms in this
-- form (either may be empty), in the same form.
CREATE FUNCTION histogram_add(b1 smallint[], n1 integer[], b2 smallint[], n2 integer[],
	OUT buckets smallint[], OUT counts integer[])
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
	SELECT coalesce(array_agg(b ORDER BY b), '{}'), coalesce(array_agg(n ORDER BY b), '{}')
	FROM (SELECT b, sum(n)::integer AS n
		FROM (SELECT * FROM unnest(b1, n1) UNION ALL SELECT * FROM unnest(b2, n2)) AS x(b, n)
		GROUP BY b) AS s
$$;

DROP TABLE slo_latency, slo_attempt, slo_latency_hour, slo_attempt_hour;
CREATE TABLE slo_latency (
	content_class text NOT NULL,
	minute        timestamptz NOT NULL,
	buckets       smallint[] NOT NULL,
	counts        integer[] NOT NULL,
	PRIMARY KEY (content_class, minute)
);
CREATE INDEX slo_latency_minute ON slo_latency (minute);
CREATE TABLE slo_attempt (
	content_class text NOT NULL,
	minute        timestamptz NOT NULL,
	outcome       text NOT NULL,
	buckets       smallint[] NOT NULL,
	counts        integer[] NOT NULL,
	PRIMARY KEY (content_class, minute, outcome)
);
CREATE INDEX slo_attempt_minute ON slo_attempt (minute);
CREATE TABLE slo_latency_hour (
	hour          timestamptz NOT NULL,
	content_class text NOT NULL,
	buckets       smallint[] NOT NULL,
	counts        integer[] NOT NULL,
	PRIMARY KEY (hour, content_class)
);
CREATE TABLE slo_attempt_hour (
	hour          timestamptz NOT NULL,
	content_class text NOT NULL,
	outcome       text NOT NULL,
	buckets       smallint[] NOT NULL,
	counts        integer[] NOT NULL,
	PRIMARY KEY (hour, content_class, outcome)
);
