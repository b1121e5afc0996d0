-- The providers read model (docs/projections.md, "providers"): each named
-- provider's attempts, the reviews it decided, and what its shadow
-- observations (ShadowObserved, from the reviews' shadow streams) came to
-- beside the deciding finding. Owned by the providers projection, which
-- fills them from the ledger when it first starts.

-- provider_open: what later events of a review need, from its submission
-- until it has left the automated path for good (closed_at) and every
-- shadow its first attempt was sent to has been observed, or ten minutes
-- of the ledger's time after it closed. Provider names are policy names
-- ([a-z][a-z0-9_-]*), so the lists are kept comma-separated.
--   providers: attempt n went to the n-th name.
--   awaiting:  the shadows of the first attempt not yet observed.
--   pending:   shadow findings waiting for the review's first finding,
--              as name=state.
--   decided:   the state of the review's first finding, once there is one.
CREATE TABLE provider_open (
	review_id     text PRIMARY KEY,
	content_class text NOT NULL,
	submitted_at  timestamptz NOT NULL,
	deadline      timestamptz NOT NULL,
	human_gate    boolean NOT NULL,
	providers     text NOT NULL DEFAULT '',
	awaiting      text NOT NULL DEFAULT '',
	pending       text NOT NULL DEFAULT '',
	decided       text,
	closed_at     timestamptz
);
-- The expiry of closed reviews whose shadows never came: every batch asks
-- for the rows closed before a cutoff.
CREATE INDEX provider_open_closed ON provider_open (closed_at) WHERE closed_at IS NOT NULL;

-- provider_minute: counts per minute, content class and provider.
-- Attempts count in the minute they ended; the review-level counts
-- (decided, shadow observations and comparisons) in the minute the review
-- was submitted, so that a minute is a cohort of reviews.
CREATE TABLE provider_minute (
	minute                timestamptz NOT NULL,
	content_class         text NOT NULL,
	provider              text NOT NULL,
	attempts              bigint NOT NULL DEFAULT 0,
	attempt_findings      bigint NOT NULL DEFAULT 0,
	attempt_timeouts      bigint NOT NULL DEFAULT 0,
	attempt_failures      bigint NOT NULL DEFAULT 0,
	attempt_within_budget bigint NOT NULL DEFAULT 0,
	decided               bigint NOT NULL DEFAULT 0,
	decided_within_budget bigint NOT NULL DEFAULT 0,
	shadow_observed       bigint NOT NULL DEFAULT 0,
	shadow_findings       bigint NOT NULL DEFAULT 0,
	shadow_timeouts       bigint NOT NULL DEFAULT 0,
	shadow_errors         bigint NOT NULL DEFAULT 0,
	shadow_missing        bigint NOT NULL DEFAULT 0,
	shadow_within_budget  bigint NOT NULL DEFAULT 0,
	compared              bigint NOT NULL DEFAULT 0,
	agreed                bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (minute, content_class, provider)
);

-- provider_latency: the latency histogram (projections/histogram.go's
-- buckets) of each provider's findings, as a deciding provider's attempts
-- (kind attempt) and as a shadow (kind shadow), by the minute of the
-- count's row in provider_minute.
CREATE TABLE provider_latency (
	minute        timestamptz NOT NULL,
	content_class text NOT NULL,
	provider      text NOT NULL,
	kind          text NOT NULL,
	bucket        smallint NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (minute, content_class, provider, kind, bucket)
);

-- provider_confusion: a shadow's finding against the review's first
-- finding, counted per pair of states in the review's submission minute.
CREATE TABLE provider_confusion (
	minute        timestamptz NOT NULL,
	content_class text NOT NULL,
	provider      text NOT NULL,
	shadow_state  text NOT NULL,
	decided_state text NOT NULL,
	n             bigint NOT NULL,
	PRIMARY KEY (minute, content_class, provider, shadow_state, decided_state)
);
