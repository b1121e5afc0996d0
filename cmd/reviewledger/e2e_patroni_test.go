package main

// Failover drills: serve on a private three-node Patroni cluster in
// synchronous mode, reached through the multi-host DATABASE_URL, while the
// primary's PostgreSQL or its Patroni agent dies or an operator switches
// over.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/patroni"
)

// patroniPolicy gives each review a budget longer than a failover
// (Patroni's leader key lives patroni.DCSTTL), so that the reviews a
// drill catches in flight are decided after it; a longer outage sends
// them to the manual queue.
const patroniPolicy = `classes:
  e2e_load:
    budget: 60s
    attempt_timeout: 5s
    max_attempts: 5
    backoff: {initial: 100ms, max: 2s, jitter: 100ms}
    on_exhaustion: manual_review
    priority: 1
`

// drillReviews are the reviews taken before each fault, drillLate those
// submitted through it, and drillProvider the provider's latency: with
// serve's workers busy, most of the 500 are waiting or being attempted
// when the fault comes.
const (
	drillReviews  = 500
	drillLate     = 100
	drillProvider = 2 * time.Second
)

// startPatroni starts a synchronous cluster for the test. Without Patroni
// or etcd it fails under CI and skips, with the reason, elsewhere.
func startPatroni(t *testing.T) *patroni.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and Patroni; skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := patroni.Start(ctx, patroni.Options{SynchronousMode: true, Logf: t.Logf})
	if errors.Is(err, patroni.ErrMissing) && os.Getenv("CI") == "" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
		c.Stop()
	})
	return c
}

// TestE2EPatroniFailover: serve, with webhooks and signed checkpoints on,
// on a synchronous Patroni cluster through the multi-host URL. For each
// drill (SIGKILL of the primary's postgres, SIGKILL of its Patroni agent,
// a planned switchover) 500 reviews are taken (202) for a slow provider,
// the fault comes while they are in flight, and 100 more are submitted
// through it. Afterwards the old primary is
// back as a replica (rewound by Patroni where it had diverged); every
// review answered 202 is in the ledger and ended once, decided, or in the
// manual queue only after the store failed it; no provider call
// overlapped another for one review; every webhook the ledger calls for
// arrived; audit verify --public-key passes and the read models equal a
// rebuild. Each drill logs the database's unavailability window as a
// client of the multi-host URL sees it and the time to drain the backlog.
func TestE2EPatroniFailover(t *testing.T) {
	t.Parallel()
	c := startPatroni(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dbURL, err := c.CreateDatabase(ctx, "reviewledger")
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(t.TempDir(), "audit.key")
	if code, out, errOut := runBin(t, nil, "audit", "keygen", "--out", key); code != 0 {
		t.Fatalf("keygen: exit %d\n%s%s", code, out, errOut)
	}
	recv := newWebhookReceiver(t, 0)
	prov := newLoadProvider(t, drillProvider, false)
	env := notifyEnv(t, dbURL, prov.URL(), recv)
	policy := filepath.Join(t.TempDir(), "patroni-policy.yaml")
	if err := os.WriteFile(policy, []byte(patroniPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env["REVIEWLEDGER_POLICY"] = policy
	env["REVIEWLEDGER_AUDIT_SIGNING_KEY"] = key
	env["REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL"] = "500ms"
	srv := startServe(t, env)
	probe := newWriteProbe(t, ctx, dbURL)

	drills := []struct {
		name  string
		fault func(old *patroni.Member) error
	}{
		{"kill-postgres", func(old *patroni.Member) error { return old.KillPostgres() }},
		{"kill-agent", func(old *patroni.Member) error { old.KillAgent(); return nil }},
		{"switchover", func(*patroni.Member) error { _, err := c.Switchover(ctx); return err }},
	}
	for _, d := range drills {
		t.Run(d.name, func(t *testing.T) {
			old, err := c.Leader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// Every review taken (202) before the fault: most are still
			// waiting for a worker or at the provider when it comes.
			ids := reviewIDs("ha-"+d.name, drillReviews)
			submitAll(t, []*serveProc{srv}, ids, "e2e_load", 32)
			waiting := prov.undecided(ids)
			// More are submitted through the failover, as the platform
			// would go on submitting.
			late := reviewIDs("ha-late-"+d.name, drillLate)
			submitted := make(chan struct{})
			go func() {
				defer close(submitted)
				submitAll(t, []*serveProc{srv}, late, "e2e_load", 8)
			}()
			faulted := time.Now()
			if err := d.fault(old); err != nil {
				t.Fatal(err)
			}
			waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
			leader, err := c.WaitLeader(waitCtx, old)
			cancel()
			if d.name == "kill-postgres" && err != nil {
				// Patroni may restart a crashed primary in place rather than
				// fail over: the leader is then the same member.
				leader, err = c.Leader(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			if d.name == "kill-agent" {
				// Its PostgreSQL still runs as a primary whose commits wait
				// for a standby that follows another leader now; the agent,
				// started again as a supervisor would, demotes and rewinds it.
				if err := old.StartAgent(); err != nil {
					t.Fatal(err)
				}
			}
			<-submitted
			ids = append(ids, late...)
			for _, id := range ids {
				settledState(t, []*serveProc{srv}, id)
			}
			drained := time.Since(faulted)
			if err := c.WaitHealthy(ctx); err != nil {
				t.Fatal(err)
			}
			if old != leader {
				if err := c.WaitReplica(ctx, old); err != nil {
					t.Fatal(err)
				}
			}
			t.Logf("%s of %s, %d of %d reviews in flight (waiting for the provider's answer or its call): %s leads; the multi-host URL refused writes for %s; %d reviews (%d submitted through the failover) decided %s after the fault; %s back as a replica",
				d.name, old.Name, waiting, drillReviews, leader.Name, probe.window(faulted).Round(time.Millisecond),
				len(ids), drillLate, drained.Round(time.Millisecond), old.Name)
			checkDrill(t, srv, prov, recv, ids)
			checkSigned(t, srv, key+".pub")
			checkRebuildEqual(t, srv, dbURL)
		})
	}
	if srv.exited() {
		t.Fatalf("serve exited: %v", srv.err)
	}
}

// undecided counts the reviews of ids the provider has not answered yet:
// not called, or called and not answered.
func (p *loadProvider) undecided(ids []string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(p.attempts[id]) == 0 || p.inFlight[id] > 0 {
			n++
		}
	}
	return n
}

// checkDrill checks each review ended once: decided, or escalated to the
// manual queue only where an attempt was lost to the store; no provider
// call overlapped another for one review; and every webhook the ledger
// calls for arrived.
func checkDrill(t *testing.T, srv *serveProc, prov *loadProvider, recv *webhookReceiver, ids []string) {
	t.Helper()
	var accepted, manual []string
	for _, id := range ids {
		switch v := srv.review(t, id); v.State {
		case "accepted":
			accepted = append(accepted, id)
		case "manual_review":
			manual = append(manual, id)
			if evs := srv.events(t, id); !lostToStore(evs) {
				t.Errorf("%s in the manual queue with no attempt lost to the store: %v", id, attemptLog(evs))
			}
		default:
			t.Errorf("%s: %s, want accepted (or manual_review after the store failed it)", id, v.State)
		}
	}
	checkOutcomes(t, srv, prov, accepted, "accepted", 5)
	checkOutcomes(t, srv, prov, manual, "manual_review", 5)
	if len(manual) > 0 {
		t.Logf("%d reviews in the manual queue after their budget passed with the store away", len(manual))
	}
	if o := prov.overlapping(); len(o) > 0 {
		t.Errorf("provider calls overlapped for one review: %v", o)
	}
	checkWebhooks(t, srv, recv, ids)
}

// lostToStore reports whether an attempt of the history was closed as
// store_unavailable.
func lostToStore(evs []eventView) bool {
	for _, e := range evs {
		if e.Type == "AttemptTimedOut" && e.field("classification") == "store_unavailable" {
			return true
		}
	}
	return false
}

// unsentAttempts is the attempts of the history that the engine closed
// without their request reaching the provider: called with nothing of
// their timeout left, or cut off before it was sent with less than half
// of it, their start's write having taken the rest (store_unavailable,
// "not called" or "not sent"; docs/engine.md). A loaded machine's first
// write can do that to any attempt; the provider never saw them.
func unsentAttempts(t *testing.T, evs []eventView) map[int]bool {
	t.Helper()
	out := map[int]bool{}
	for _, e := range ofType(evs, "AttemptTimedOut") {
		var a domain.AttemptTimedOut
		if err := json.Unmarshal(e.Data, &a); err != nil {
			t.Fatalf("AttemptTimedOut %s: %v", e.Data, err)
		}
		if a.Classification == domain.ClassStoreUnavailable &&
			(strings.HasPrefix(a.Detail, "not called:") || strings.HasPrefix(a.Detail, "not sent:")) {
			out[a.Attempt] = true
		}
	}
	return out
}

// checkWebhooks waits until the receiver has, after de-duplication by
// webhook-id, every webhook the reviews' histories call for.
func checkWebhooks(t *testing.T, srv *serveProc, recv *webhookReceiver, ids []string) {
	t.Helper()
	want := map[string][]wantWebhook{}
	for _, id := range ids {
		want[id] = expectedWebhooks(t, srv, id)
	}
	clocktest.EventuallyShows(t, "every webhook delivered", func() (bool, string) {
		got, _ := recv.distinct()
		byReview := map[string][]wantWebhook{}
		for _, w := range got {
			byReview[w.Data.ReviewID] = append(byReview[w.Data.ReviewID], wantWebhook{w.Type, w.Data.Version, w.Data.State})
		}
		for id, w := range want {
			if !slices.Equal(byReview[id], w) {
				return false, fmt.Sprintf("%s: received %v, the ledger calls for %v", id, byReview[id], w)
			}
		}
		return true, ""
	})
	if bad := recv.invalidRequests(); len(bad) > 0 {
		t.Errorf("%d webhook requests failed verification: %v", len(bad), bad[:min(5, len(bad))])
	}
}

// checkSigned runs audit verify with the public key: every chain and
// every signed checkpoint holds.
func checkSigned(t *testing.T, srv *serveProc, pub string) {
	t.Helper()
	code, out, errOut := srv.cli(t, "audit", "verify", "--public-key", pub)
	if code != 0 || strings.Contains(out, "DAMAGED") {
		t.Fatalf("audit verify --public-key: exit %d\n%s%s", code, out, errOut)
	}
}

// writeProbe writes a row through the multi-host URL every 50 ms, each on
// a new connection with a 2 s bound, and keeps when each write failed and
// succeeded: what a client of the URL sees of a failover.
type writeProbe struct {
	mu      sync.Mutex
	results []probeResult
}

type probeResult struct {
	at, done time.Time // the write's start and end
	ok       bool
}

func newWriteProbe(t *testing.T, ctx context.Context, dbURL string) *writeProbe {
	t.Helper()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE TABLE drill_probe (at timestamptz NOT NULL)`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := &writeProbe{}
	probeCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { p.run(probeCtx, dbURL) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return p
}

func (p *writeProbe) run(ctx context.Context, dbURL string) {
	for ctx.Err() == nil {
		at := time.Now()
		wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := probeWrite(wctx, dbURL)
		cancel()
		p.mu.Lock()
		p.results = append(p.results, probeResult{at: at, done: time.Now(), ok: err == nil})
		p.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func probeWrite(ctx context.Context, dbURL string) error {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `INSERT INTO drill_probe VALUES (now())`)
	return err
}

// window is the time from the start of the first write after since that
// failed to the end of the first that succeeded after it; zero when none
// failed.
func (p *writeProbe) window(since time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var failed time.Time
	for _, r := range p.results {
		switch {
		case r.at.Before(since):
		case !r.ok && failed.IsZero():
			failed = r.at
		case r.ok && !failed.IsZero():
			return r.done.Sub(failed)
		}
	}
	return 0
}
