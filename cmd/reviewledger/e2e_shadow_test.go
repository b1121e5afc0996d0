package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/projections"
)

// shadowPolicy routes class e2e_shadow to the primary, with candidate as
// its shadow.
const shadowPolicy = `providers:
  primary:
    kind: http
    url: %s
    callback_secret_env: E2E_BACKUP_SECRET
  candidate:
    kind: http
    url: %s
    callback_secret_env: E2E_PRIMARY_SECRET
    concurrency: 64
classes:
  e2e_shadow:
    budget: 6s
    attempt_timeout: 2s
    max_attempts: 2
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
    provider: primary
    shadows: [candidate]
`

// A shadow that disagrees with the primary on one review in ten: every
// review is decided by the primary alone, each first attempt records the
// shadow and each shadow answer is in the ledger, and GET
// /v1/slo/providers reports 90% agreement with the confusion matrix that a
// recount of the ledger gives.
func TestE2EShadowComparison(t *testing.T) {
	t.Parallel()
	primary, candidate := newScriptedProvider(t), newScriptedProvider(t)
	proc, dbURL := policyServer(t, fmt.Sprintf(shadowPolicy, primary.URL(), candidate.URL()), primary)
	const n = 60
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("shadow-%d", i)
		decided, shadow := "accepted", "accepted"
		if i%3 == 0 {
			decided, shadow = "rejected", "rejected"
		}
		if i%10 == 7 { // the disagreement
			shadow = map[string]string{"accepted": "rejected", "rejected": "accepted"}[decided]
		}
		primary.script(ids[i], finding(decided, "primary"))
		candidate.script(ids[i], finding(shadow, "candidate"))
		proc.submit(t, ids[i], "e2e_shadow", content("shadowed"))
	}
	for _, id := range ids {
		v := proc.waitSettled(t, id)
		if v.DecidedByProvider != "primary" {
			t.Fatalf("%s decided by %q, want the primary: %v", id, v.DecidedByProvider, eventTypes(proc.events(t, id)))
		}
		starts := ofType(proc.events(t, id), "AttemptStarted")
		if len(starts) != 1 || fmt.Sprint(starts[0].field("shadows")) != "[candidate]" {
			t.Fatalf("%s: attempts %v, want one recording the shadow candidate", id, starts)
		}
	}

	want := recountShadows(t, dbURL, "candidate")
	if want.Observed != n || want.Compared != n || want.Agreed != n-n/10 {
		t.Fatalf("the ledger holds %+v, want %d observed and compared, %d agreeing", want, n, n-n/10)
	}
	var got projections.ProviderSLO
	clocktest.EventuallyShows(t, "the comparison of every shadow finding", func() (bool, string) {
		var r projections.ProviderReport
		if err := json.Unmarshal(proc.expect(t, http.StatusOK, http.MethodGet, "/v1/slo/providers?window=1h&content_class=e2e_shadow&provider=candidate", tokAuditor, nil).Body, &r); err != nil {
			t.Fatal(err)
		}
		if len(r.Providers) != 1 {
			return false, fmt.Sprintf("%+v", r)
		}
		got = r.Providers[0]
		return got.Shadow.Compared == n, fmt.Sprintf("%+v", got.Shadow)
	})
	sh := got.Shadow
	if sh.AgreementRatio != 0.9 || sh.Agreed != want.Agreed || sh.Observed != n || sh.Findings != n || sh.Timeouts+sh.Errors+sh.Missing != 0 {
		t.Errorf("candidate as a shadow: %+v, want 90%% agreement of %d", sh, n)
	}
	if fmt.Sprint(sh.Confusion) != fmt.Sprint(want.Confusion) {
		t.Errorf("confusion %v, the ledger's recount %v", sh.Confusion, want.Confusion)
	}
	if sh.WithinBudget != n || sh.LatencyMS.P99 <= 0 {
		t.Errorf("candidate: %d of %d within budget, latency %+v", sh.WithinBudget, n, sh.LatencyMS)
	}
	var decider projections.ProviderReport
	if err := json.Unmarshal(proc.expect(t, http.StatusOK, http.MethodGet, "/v1/slo/providers?window=1h&provider=primary", tokAuditor, nil).Body, &decider); err != nil {
		t.Fatal(err)
	}
	if len(decider.Providers) != 1 || decider.Providers[0].Decided != n || decider.Providers[0].Attempts.Findings != n ||
		decider.Providers[0].Shadow.Observed != 0 {
		t.Errorf("the primary: %+v, want %d decided, no shadow observation", decider.Providers, n)
	}
	proc.expectProblem(t, http.StatusBadRequest, http.MethodGet, "/v1/slo/providers?provider=Not-A-Name", tokAuditor, nil)
}

// shadowRecount is what the ledger says of one shadow provider.
type shadowRecount struct {
	Observed, Compared, Agreed int64
	Confusion                  []projections.ConfusionCell
}

// recountShadows counts, straight from the ledger's event table, the
// shadow's findings and how they compare with each review's first
// finding.
func recountShadows(t *testing.T, dbURL, provider string) shadowRecount {
	t.Helper()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, err := pool.Query(ctx, `WITH shadow AS (
			SELECT substr(stream, length('shadows-') + 1) AS review_id, convert_from(data, 'UTF8')::jsonb AS d
			FROM event WHERE type = 'ShadowObserved' AND stream LIKE 'shadows-%'),
		finding AS (
			SELECT stream, revision, convert_from(data, 'UTF8')::jsonb AS b
			FROM event WHERE type = 'FindingReceived' AND stream LIKE 'review-%'),
		first AS (
			-- a body stored compact (schema 3) is an array: the state is its second element
			SELECT DISTINCT ON (stream) substr(stream, length('review-') + 1) AS review_id,
				CASE jsonb_typeof(b) WHEN 'array' THEN b ->> 1 ELSE b ->> 'state' END AS state
			FROM finding ORDER BY stream, revision)
		SELECT s.d ->> 'state', f.state, count(*) FROM shadow s JOIN first f USING (review_id)
		WHERE s.d ->> 'provider' = $1 AND s.d ->> 'outcome' = 'finding'
		GROUP BY 1, 2 ORDER BY 1, 2`, provider)
	if err != nil {
		t.Fatal(err)
	}
	var out shadowRecount
	for rows.Next() {
		var c projections.ConfusionCell
		if err := rows.Scan(&c.Shadow, &c.Decided, &c.Count); err != nil {
			t.Fatal(err)
		}
		out.Confusion = append(out.Confusion, c)
		out.Compared += c.Count
		if c.Shadow == c.Decided {
			out.Agreed += c.Count
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM event WHERE type = 'ShadowObserved'
		AND convert_from(data, 'UTF8')::jsonb ->> 'provider' = $1`, provider).Scan(&out.Observed); err != nil {
		t.Fatal(err)
	}
	return out
}
