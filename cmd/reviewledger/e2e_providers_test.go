package main

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// e2ePrimaryKey signs the primary's callbacks: another secret than the
// default provider's and the backup's (e2eSecret).
var e2ePrimaryKey = []byte("e2e-primary-key-0123456789abcdef")

// downProvider answers 503 to every call while down is set, and after a
// delay (slow) otherwise a finding; it counts its calls.
type downProvider struct {
	srv   *httptest.Server
	down  atomic.Bool
	slow  time.Duration // while down, answer this late instead of 503
	calls atomic.Int64
	done  chan struct{}
	once  sync.Once
}

func newDownProvider(t *testing.T, slow time.Duration) *downProvider {
	p := &downProvider{slow: slow, done: make(chan struct{})}
	p.down.Store(true)
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.calls.Add(1)
		if !p.down.Load() {
			accept()(nil, w, r, reviewIDOf(r), 0)
			return
		}
		if p.slow > 0 {
			select {
			case <-time.After(p.slow):
			case <-r.Context().Done():
				return
			case <-p.done:
				return
			}
		}
		status(http.StatusServiceUnavailable, "")(nil, w, r, "", 0)
	}))
	t.Cleanup(func() {
		p.once.Do(func() { close(p.done) })
		p.srv.Close()
	})
	return p
}

// reviewIDOf reads the review ID of a provider request from its
// Idempotency-Key (the review ID, docs/contracts.md §4).
func reviewIDOf(r *http.Request) string { return r.Header.Get("Idempotency-Key") }

// twoProviderServer starts serve with class e2e_failover routed to the
// primary, then the backup (the scripted provider, which shares the
// default provider's secret); circuit is the primary's circuit settings.
func twoProviderServer(t *testing.T, primary *downProvider, primaryTimeout, circuit string) (*serveProc, *scriptedProvider) {
	t.Helper()
	backup := newScriptedProvider(t)
	proc, _ := policyServer(t, failoverPolicyFor(primary.srv.URL+"/moderate", primaryTimeout, circuit, backup.URL()), backup)
	return proc, backup
}

// failoverPolicyFor is a policy file routing class e2e_failover to the
// provider primary at primaryURL (its callbacks signed with
// E2E_PRIMARY_SECRET, its timeout and circuit as given), then backup.
func failoverPolicyFor(primaryURL, primaryTimeout, circuit, backupURL string) string {
	return fmt.Sprintf(`providers:
  primary:
    kind: http
    url: %s
    callback_secret_env: E2E_PRIMARY_SECRET
    timeout: %s
    circuit: %s
  backup:
    kind: http
    url: %s
    callback_secret_env: E2E_BACKUP_SECRET
classes:
  e2e_failover:
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
    provider: primary
    fallbacks: [backup]
`, primaryURL, primaryTimeout, circuit, backupURL)
}

// policyServer starts serve with policy as its policy file, the default
// provider at def, callbacks of def's reviews sent to it, and the secrets
// E2E_PRIMARY_SECRET (e2ePrimaryKey) and E2E_BACKUP_SECRET (the default
// provider's); it returns the server and its database's URL.
func policyServer(t *testing.T, policy string, def *scriptedProvider) (*serveProc, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "providers.yaml")
	if err := os.WriteFile(path, []byte(policy), 0o600); err != nil {
		t.Fatal(err)
	}
	dbURL := dbtest.URL(t)
	env := baseServeEnv(t, dbURL, def.URL())
	env["REVIEWLEDGER_POLICY"] = path
	env["E2E_PRIMARY_SECRET"] = "whsec_" + base64.StdEncoding.EncodeToString(e2ePrimaryKey)
	env["E2E_BACKUP_SECRET"] = e2eSecret
	proc := startServe(t, env)
	def.setTarget(proc.URL)
	return proc, dbURL
}

// attemptProviders lists the provider each attempt of id names, in
// order, leaving out the attempts never sent (unsentAttempts).
func attemptProviders(t *testing.T, p *serveProc, id string) []string {
	t.Helper()
	evs := p.events(t, id)
	unsent := unsentAttempts(t, evs)
	var out []string
	for _, e := range ofType(evs, "AttemptStarted") {
		if attempt, _ := e.field("attempt").(float64); unsent[int(attempt)] {
			continue
		}
		name, _ := e.field("provider").(string)
		if name == "" {
			name = "default"
		}
		out = append(out, name)
	}
	return out
}

// The primary is down: every review is decided by the fallback within its
// budget, none reaches the manual queue, and each attempt records its
// provider. The fallback's callbacks verify with its own secret, not the
// primary's.
func TestE2EFailoverPrimaryDown(t *testing.T) {
	t.Parallel()
	primary := newDownProvider(t, 0)
	proc, backup := twoProviderServer(t, primary, "1s", "{min_calls: 100000}")
	const n = 40
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("failover-%d", i)
		if i%4 == 0 {
			backup.script(ids[i], async("accepted", "by callback"))
		}
		proc.submit(t, ids[i], "e2e_failover", content("failover"))
	}
	for _, id := range ids {
		v := proc.waitSettled(t, id)
		if v.State != "accepted" || v.DecidedByProvider != "backup" {
			t.Fatalf("%s is %s decided by %q, want accepted by the fallback: %v", id, v.State, v.DecidedByProvider, eventTypes(proc.events(t, id)))
		}
		if took := v.DecidedAt.Sub(v.SubmittedAt); took > 6*time.Second {
			t.Fatalf("%s decided %s after submission, past its 6s budget", id, took)
		}
		if got := attemptProviders(t, proc, id); strings.Join(got, ",") != "primary,backup" {
			t.Fatalf("%s attempts went to %v, want primary then backup", id, got)
		}
	}
	if items := proc.queue(t, "?content_class=e2e_failover&limit=1000"); len(items) != 0 {
		t.Fatalf("%d reviews in the manual queue, want none", len(items))
	}
	if got := primary.calls.Load(); got != n {
		t.Fatalf("the primary was called %d times for %d reviews, want once each", got, n)
	}
	for i := 0; i < n; i += 4 {
		if got := backup.callbackStatuses(ids[i]); len(got) != 1 || got[0] != http.StatusOK {
			t.Fatalf("%s: the fallback's callbacks were answered %v, want [200]", ids[i], got)
		}
	}
	// A callback for the fallback's attempt signed with the primary's
	// secret is refused.
	id := "failover-forged"
	backup.script(id, async(""))
	proc.submit(t, id, "e2e_failover", content("forged"))
	clocktest.EventuallyShows(t, "the fallback's attempt in flight", func() (bool, string) {
		got := attemptProviders(t, proc, id)
		return strings.Join(got, ",") == "primary,backup", fmt.Sprint(got)
	})
	code, err := backup.sendCallback(id, 2, "rejected", []string{"forged"}, time.Now(), e2ePrimaryKey)
	if err != nil || code != http.StatusUnauthorized {
		t.Fatalf("a callback signed with the other provider's secret: %d %v, want 401", code, err)
	}
	metrics := string(proc.expect(t, http.StatusOK, http.MethodGet, "/metrics", "", nil).Body)
	for _, want := range []string{`reviewledger_engine_provider_calls_total{outcome="provider_unavailable",provider="primary"}`,
		`reviewledger_engine_provider_calls_total{outcome="finding",provider="backup"}`} {
		if !strings.Contains(metrics, want) {
			t.Fatalf("/metrics has no %s", want)
		}
	}
}

// The primary is slow (past its 300ms timeout): its circuit opens after
// five failed calls, reviews then go to the fallback first without
// costing an attempt at the primary, and once the primary recovers a
// probe closes the circuit and reviews go to it again.
func TestE2ECircuitOpensAndCloses(t *testing.T) {
	t.Parallel()
	primary := newDownProvider(t, 5*time.Second)
	proc, _ := twoProviderServer(t, primary, "300ms", "{failure_ratio: 0.5, window: 1m, min_calls: 5, open_for: 5s, probes: 1}")
	run := func(id string) []string {
		proc.submit(t, id, "e2e_failover", content(id))
		if v := proc.waitSettled(t, id); v.State != "accepted" {
			t.Fatalf("%s is %s: %v", id, v.State, eventTypes(proc.events(t, id)))
		}
		return attemptProviders(t, proc, id)
	}
	for i := range 5 {
		if got := run(fmt.Sprintf("circuit-closed-%d", i)); strings.Join(got, ",") != "primary,backup" {
			t.Fatalf("review %d before the circuit opened went to %v", i, got)
		}
	}
	// The circuit opened with the fifth failure, at the latest now; it
	// stays open 5s: the reviews decided within them are checked.
	opened := time.Now()
	calls := primary.calls.Load()
	checked := 0
	for i := range 5 {
		got := run(fmt.Sprintf("circuit-open-%d", i))
		if time.Since(opened) >= 5*time.Second {
			break
		}
		checked++
		if strings.Join(got, ",") != "backup" {
			t.Fatalf("review %d with the primary's circuit open went to %v, want the fallback alone", i, got)
		}
		if primary.calls.Load() != calls {
			t.Fatalf("the open circuit let %d calls through", primary.calls.Load()-calls)
		}
	}
	if checked == 0 {
		t.Fatal("no review was decided while the circuit was open: each took longer than the 5s it stays open")
	}
	primary.down.Store(false)
	n := 0
	clocktest.EventuallyShows(t, "a review decided by the recovered primary", func() (bool, string) {
		n++
		got := run(fmt.Sprintf("circuit-probe-%d", n))
		return strings.Join(got, ",") == "primary", fmt.Sprint(got)
	})
	for i := range 3 {
		if got := run(fmt.Sprintf("circuit-closed-again-%d", i)); strings.Join(got, ",") != "primary" {
			t.Fatalf("review %d after the circuit closed went to %v, want the primary", i, got)
		}
	}
}

// The primary takes the review for asynchronous review (202) and does not
// call back within its attempt; the fallback decides. The primary's
// finding that comes after is refused like any late completion (409, a
// conflicting completion), signed with its own secret, and the review
// stays as the fallback decided it.
func TestE2ELateFindingOfTheFailedPrimary(t *testing.T) {
	t.Parallel()
	primary, backup := newScriptedProvider(t), newScriptedProvider(t)
	// The primary's circuit never opens here: the test is its late answer.
	proc, _ := policyServer(t, failoverPolicyFor(primary.URL(), "1s", "{min_calls: 100000}", backup.URL()), backup)
	primary.setTarget(proc.URL)
	const id = "late-primary"
	primary.script(id, async(""))
	proc.submit(t, id, "e2e_failover", content("late"))
	v := proc.waitSettled(t, id)
	if v.State != "accepted" || v.DecidedByProvider != "backup" {
		t.Fatalf("%s is %s decided by %q, want accepted by the fallback: %v", id, v.State, v.DecidedByProvider, eventTypes(proc.events(t, id)))
	}
	if got := attemptProviders(t, proc, id); strings.Join(got, ",") != "primary,backup" {
		t.Fatalf("attempts went to %v, want primary then backup", got)
	}
	code, err := primary.sendCallback(id, 1, "rejected", []string{"late"}, time.Now(), e2ePrimaryKey)
	if err != nil || code != http.StatusConflict {
		t.Fatalf("the primary's late finding: %d %v, want 409", code, err)
	}
	after := proc.waitSettled(t, id)
	if after.State != "accepted" || after.DecidedByProvider != "backup" || after.Version != v.Version {
		t.Fatalf("after the late finding: %+v, want it untouched (%+v)", after, v)
	}
}
