package main

// End-to-end tests of the review engine under faults: the database going
// away (a private PostgreSQL server restarted, and killed), serve processes
// joining, leaving and dying while they share the work, and many reviews
// waiting at once. Every review's outcome is read through the HTTP API;
// the provider (loadProvider) answers any review.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/migrations/dbtest/cluster"
)

// enginePolicy is the policy of these tests: budgets long enough that only a
// fault of ours could send a review to the manual queue.
const enginePolicy = `classes:
  e2e_load:
    budget: 15s
    attempt_timeout: 5s
    max_attempts: 3
    backoff: {initial: 50ms, max: 500ms, jitter: 50ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_parked:
    budget: 30m
    attempt_timeout: 20m
    max_attempts: 2
    backoff: {initial: 50ms, max: 500ms, jitter: 50ms}
    on_exhaustion: manual_review
    priority: 1
`

// loadProvider accepts every review after a latency (or, async, takes it
// for asynchronous review and never calls back), and records each call:
// the attempts each review was called for, and any two calls for one
// review in progress at once.
type loadProvider struct {
	srv     *httptest.Server
	latency time.Duration
	async   bool

	mu       sync.Mutex
	inFlight map[string]int
	attempts map[string][]int
	overlaps []string
}

func newLoadProvider(t *testing.T, latency time.Duration, async bool) *loadProvider {
	p := &loadProvider{latency: latency, async: async, inFlight: map[string]int{}, attempts: map[string][]int{}}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serveHTTP))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *loadProvider) URL() string { return p.srv.URL + "/moderate" }

func (p *loadProvider) serveHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body struct {
		ReviewID string `json:"review_id"`
		Attempt  int    `json:"attempt"`
	}
	if json.Unmarshal(raw, &body) != nil {
		http.Error(w, "unexpected request", http.StatusTeapot)
		return
	}
	id := body.ReviewID
	p.mu.Lock()
	p.inFlight[id]++
	p.attempts[id] = append(p.attempts[id], body.Attempt)
	if p.inFlight[id] > 1 {
		p.overlaps = append(p.overlaps, fmt.Sprintf("%s attempt %d", id, body.Attempt))
	}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.inFlight[id]--
		p.mu.Unlock()
	}()
	if p.async {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	t := time.NewTimer(p.latency)
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"review_id": id, "state": "accepted", "reasons": []string{"load"}})
}

func (p *loadProvider) calls(id string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.attempts[id])
}

func (p *loadProvider) overlapping() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.overlaps)
}

// loadEnv is the environment of a server under load on dbURL.
func loadEnv(t *testing.T, dbURL, providerURL string) map[string]string {
	t.Helper()
	env := baseServeEnv(t, dbURL, providerURL)
	policy := filepath.Join(t.TempDir(), "load-policy.yaml")
	if err := os.WriteFile(policy, []byte(enginePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	env["REVIEWLEDGER_POLICY"] = policy
	return env
}

// submitAll submits the reviews from clients goroutines, as a platform
// behind a load balancer would: a submit that fails (an error, a 5xx, a
// 429) is made again, with the same review ID, to the next process, until
// it is answered 202 or 200, within e2eWait. procs are used in turn.
func submitAll(t *testing.T, procs []*serveProc, ids []string, class string, clients int) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	go func() {
		defer close(next)
		for i := range ids {
			next <- i
		}
	}()
	for range clients {
		wg.Go(func() {
			for i := range next {
				if err := submitUntilTaken(procs, i, ids[i], class); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}

func submitUntilTaken(procs []*serveProc, first int, id, class string) error {
	deadline := time.Now().Add(e2eWait)
	body, _ := json.Marshal(submitBody(id, class, content(id)))
	var last string
	for try := first; time.Now().Before(deadline); try++ {
		p := procs[try%len(procs)]
		req, _ := http.NewRequest(http.MethodPost, p.URL+"/v1/reviews", strings.NewReader(string(body)))
		req.Header.Set("Authorization", "Bearer "+tokSubmitter)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusAccepted || res.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("HTTP %d %s", res.StatusCode, b)
			if res.StatusCode < 500 && res.StatusCode != http.StatusTooManyRequests {
				return fmt.Errorf("submit %s: %s", id, last)
			}
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("submit %s: not taken within %s; last: %s", id, e2eWait, last)
}

// settledState polls a review through any of procs until it leaves
// pending, riding out errors (a process gone, the database restarting).
func settledState(t *testing.T, procs []*serveProc, id string) reviewView {
	t.Helper()
	var v reviewView
	var last string
	i := 0
	clocktest.EventuallyShows(t, id+" to leave pending", func() (bool, string) {
		p := procs[i%len(procs)]
		i++
		if !p.exited() {
			res := p.call(t, http.MethodGet, "/v1/reviews/"+id, tokSubmitter, nil)
			if res.Status == http.StatusOK {
				if err := json.Unmarshal(res.Body, &v); err != nil {
					t.Fatal(err)
				}
				if v.State != "pending" {
					return true, ""
				}
				last = fmt.Sprintf("%+v", v)
			} else {
				last = res.String()
			}
		}
		return false, last
	})
	return v
}

// checkOutcomes checks each review ended once: one finding or escalation,
// attempts numbered 1, 2, … without a gap and within max_attempts, every
// attempt closed, and the provider called at most once per attempt and
// for no other: once for every attempt but one lost with a killed process
// or cancelled by a stopping one (either may end before its call leaves).
func checkOutcomes(t *testing.T, p *serveProc, prov *loadProvider, ids []string, wantState string, maxAttempts int) {
	t.Helper()
	for _, id := range ids {
		v := p.review(t, id)
		if v.State != wantState {
			t.Errorf("%s: %s, want %s: %v", id, v.State, wantState, eventTypes(p.events(t, id)))
			continue
		}
		evs := p.events(t, id)
		ends, started, closed, lost := 0, 0, 0, map[float64]bool{}
		for _, e := range evs {
			switch e.Type {
			case "FindingReceived", "Escalated":
				ends++
				if e.Type == "FindingReceived" {
					closed++
				}
			case "AttemptStarted":
				started++
				if n := e.field("attempt"); n != float64(started) {
					t.Errorf("%s: attempt %v started as the %d-th: %v", id, n, started, eventTypes(evs))
				}
			case "AttemptTimedOut":
				closed++
				// Recovery classes are the engine's own cancellations
				// (owner gone, process stopping, lease not renewable):
				// the only ones an attempt the provider never saw may have.
				if c, ok := e.field("classification").(string); ok && domain.Classification(c).Recovery() {
					lost[e.field("attempt").(float64)] = true
				}
			}
		}
		if ends != 1 || started != closed || started > maxAttempts {
			t.Errorf("%s: %d ends, %d attempts started, %d closed (max %d): %v", id, ends, started, closed, maxAttempts, eventTypes(evs))
		}
		calls := prov.calls(id)
		slices.Sort(calls)
		for n := 1; n <= started; n++ {
			switch c := count(calls, n); {
			case c > 1:
				t.Errorf("%s: the provider was called %d times for attempt %d", id, c, n)
			case c == 0 && !lost[float64(n)]:
				t.Errorf("%s: attempt %d was not cancelled by the engine, yet the provider never saw it: calls %v, events %v", id, n, calls, attemptLog(evs))
			}
		}
		if len(calls) > 0 && calls[len(calls)-1] > started {
			t.Errorf("%s: the provider was called for attempts %v, the ledger has %d", id, calls, started)
		}
	}
}

// attemptLog lists a review's events, each closed attempt with its
// number and classification.
func attemptLog(evs []eventView) []string {
	out := eventTypes(evs)
	for i, e := range evs {
		if e.Type == "AttemptTimedOut" {
			out[i] = fmt.Sprintf("%s(%v, %v: %v)", e.Type, e.field("attempt"), e.field("classification"), e.field("detail"))
		}
	}
	return out
}

func count(xs []int, x int) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

func reviewIDs(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%03d", prefix, i)
	}
	return ids
}

// TestE2EDatabaseOutage: with 200 reviews in flight (15 s budget, a
// provider answering in 50 ms), the database is restarted, and separately
// killed with SIGKILL and started again. serve rides it out: no review is
// escalated for it, every one ends accepted, serve keeps running and
// /readyz recovers by itself. The database is a private server of the
// test's own, never the shared one.
func TestE2EDatabaseOutage(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"restart", "kill"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			pg := cluster.Start(t)
			dbURL := pg.CreateDatabase("reviewledger")
			prov := newLoadProvider(t, 50*time.Millisecond, false)
			srv := startServe(t, loadEnv(t, dbURL, prov.URL()))
			ids := reviewIDs("outage-"+fault, 200)
			faulted := make(chan struct{})
			go func() {
				defer close(faulted)
				time.Sleep(500 * time.Millisecond) // submissions and attempts under way
				switch fault {
				case "restart":
					pg.Restart()
				case "kill":
					pg.Kill()
					time.Sleep(time.Second)
					pg.StartAgain()
				}
			}()
			submitAll(t, []*serveProc{srv}, ids, "e2e_load", 16)
			<-faulted
			for _, id := range ids {
				settledState(t, []*serveProc{srv}, id)
			}
			if srv.exited() {
				t.Fatalf("serve exited: %v", srv.err)
			}
			checkOutcomes(t, srv, prov, ids, "accepted", 3)
			clocktest.EventuallyShows(t, "/readyz to recover", func() (bool, string) {
				res := srv.call(t, http.MethodGet, "/readyz", "", nil)
				return res.Status == http.StatusOK, res.String()
			})
			if items := srv.queue(t, "?limit=1000"); len(items) != 0 {
				t.Errorf("%d reviews in the manual queue", len(items))
			}
			// The outage was felt while reviews were being worked.
			errs := metricValue(t, srv, "reviewledger_engine_store_errors_total")
			t.Logf("%v store errors retried", errs)
			if errs == 0 {
				t.Error("the engine saw no store error: the fault missed the reviews in flight")
			}
		})
	}
}

// TestE2EProcessesShareWork: two serve processes share the work through the
// PostgreSQL dispatch, a third starts mid-run and the first is stopped: the
// provider never sees two calls in progress at once for one review, and
// every review ends once.
func TestE2EProcessesShareWork(t *testing.T) {
	t.Parallel()
	prov := newLoadProvider(t, 100*time.Millisecond, false)
	env := loadEnv(t, dbtest.URL(t), prov.URL())
	env["REVIEWLEDGER_PUBSUB"] = "postgres"
	procs := []*serveProc{startServe(t, env), startServe(t, env)}
	ids := reviewIDs("share", 150)
	var wg sync.WaitGroup
	wg.Go(func() {
		time.Sleep(300 * time.Millisecond)
		third := startServe(t, env)
		time.Sleep(300 * time.Millisecond)
		procs[0].stop(t)
		_ = third
	})
	submitAll(t, []*serveProc{procs[1]}, ids[:50], "e2e_load", 8)
	submitAll(t, procs, ids[50:], "e2e_load", 8)
	wg.Wait()
	for _, id := range ids {
		settledState(t, procs[1:], id)
	}
	if o := prov.overlapping(); len(o) > 0 {
		t.Errorf("calls in progress at once for one review: %v", o)
	}
	checkOutcomes(t, procs[1], prov, ids, "accepted", 3)
}

// TestE2EWorkerKilled: one of two serve processes sharing the work is
// killed with SIGKILL mid-run, on each durable dispatch backend: every
// review is decided exactly once, attempts never exceed max_attempts,
// attempt numbers have no gaps.
func TestE2EWorkerKilled(t *testing.T) {
	t.Parallel()
	for _, pubsub := range []string{"postgres", "nats"} {
		t.Run(pubsub, func(t *testing.T) {
			t.Parallel()
			if pubsub == "nats" {
				natsAvailable(t)
			}
			prov := newLoadProvider(t, 200*time.Millisecond, false)
			env := loadEnv(t, dbtest.URL(t), prov.URL())
			env["REVIEWLEDGER_PUBSUB"] = pubsub
			if pubsub == "nats" {
				env["REVIEWLEDGER_WORK_TOPIC"] = natsTopic(t, "killed")
			}
			procs := []*serveProc{startServe(t, env), startServe(t, env)}
			ids := reviewIDs("killed-"+pubsub, 120)
			var wg sync.WaitGroup
			wg.Go(func() {
				time.Sleep(700 * time.Millisecond)
				procs[0].kill(t)
			})
			submitAll(t, procs, ids, "e2e_load", 8)
			wg.Wait()
			for _, id := range ids {
				settledState(t, procs[1:], id)
			}
			checkOutcomes(t, procs[1], prov, ids, "accepted", 3)
		})
	}
}

// TestE2EParkedReviews: 10,000 reviews waiting for callbacks that do not
// come hold no goroutine and little memory: go_goroutines on /metrics stays
// within a few hundred of its idle value, and the resident memory under
// 200 MB. The binary is built without the race detector (whose shadow
// memory would be measured too).
func TestE2EParkedReviews(t *testing.T) {
	t.Parallel()
	prov := newLoadProvider(t, 0, true)
	env := loadEnv(t, dbtest.URL(t), prov.URL())
	srv := startServeBin(t, plainBin(t), env)
	idle := metricValue(t, srv, "go_goroutines")
	const n = 10000
	ids := reviewIDs("parked", n)
	submitAll(t, []*serveProc{srv}, ids, "e2e_parked", 32)
	var parked float64
	clocktest.EventuallyShows(t, "every review to be parked", func() (bool, string) {
		parked = metricValue(t, srv, "reviewledger_engine_parked_reviews")
		inFlight := metricValue(t, srv, "reviewledger_engine_in_flight_reviews")
		return parked == n && inFlight == 0, fmt.Sprintf("%v parked, %v in flight", parked, inFlight)
	})
	goroutines := metricValue(t, srv, "go_goroutines")
	rss := metricValue(t, srv, "process_resident_memory_bytes")
	t.Logf("%v reviews parked: %v goroutines (%v idle), resident memory %.0f MiB", parked, goroutines, idle, rss/(1<<20))
	if goroutines > idle+300 {
		t.Errorf("%v goroutines with %d reviews parked, %v idle", goroutines, n, idle)
	}
	if rss >= 200<<20 {
		t.Errorf("resident memory %.0f MiB with %d reviews parked, want under 200 MiB", rss/(1<<20), n)
	}
	for _, id := range []string{ids[0], ids[n/2], ids[n-1]} {
		if v := srv.review(t, id); v.State != "pending" || v.Attempts != 1 {
			t.Errorf("%s: %+v, want pending in attempt 1", id, v)
		}
	}
}

// metricValue reads one unlabelled sample from the server's /metrics.
func metricValue(t *testing.T, p *serveProc, name string) float64 {
	t.Helper()
	res := p.call(t, http.MethodGet, "/metrics", "", nil)
	if res.Status != http.StatusOK {
		t.Fatalf("/metrics: %s", res)
	}
	sc := bufio.NewScanner(bytes.NewReader(res.Body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			return f
		}
	}
	t.Fatalf("/metrics has no %s", name)
	return 0
}

var (
	plainOnce sync.Once
	plainPath string
	plainErr  error
)

// plainBin builds the binary without the race detector, once.
func plainBin(t *testing.T) string {
	t.Helper()
	reviewledgerBin(t) // makes binDir, and skips with -short
	plainOnce.Do(func() {
		plainPath = filepath.Join(binDir, "reviewledger-plain")
		out, err := exec.Command("go", "build", "-o", plainPath, ".").CombinedOutput()
		if err != nil {
			plainErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if plainErr != nil {
		t.Fatal(plainErr)
	}
	return plainPath
}

// startServeBin is startServe with another build of the binary.
func startServeBin(t *testing.T, bin string, env map[string]string) *serveProc {
	t.Helper()
	p, err := tryServeBin(t, bin, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
