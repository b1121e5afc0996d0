package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestMain lets the test binary serve a floor as the bench's binary does:
// a floor round re-runs the binary it runs in.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == floorCommand {
		os.Exit(floorServe(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// floorUnderTest serves a floor of mode on a test server, with the bench's
// instant provider, or provider when given.
func floorUnderTest(t *testing.T, mode, dbURL string, provider http.Handler) string {
	t.Helper()
	provURL := ""
	if provider == nil {
		prov, u, err := instantProvider()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = prov.Close() })
		provURL = u
	} else {
		p := httptest.NewServer(provider)
		t.Cleanup(p.Close)
		provURL = p.URL
	}
	f, err := newFloor(context.Background(), mode, dbURL, provURL, "floor-token-000001", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	srv := httptest.NewServer(f.echo())
	t.Cleanup(srv.Close)
	return srv.URL
}

func postFloor(t *testing.T, base, token, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/v1/reviews?wait=30s", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// The CRUD table behind the API runs the baseline's statements and answers
// the decision with the submit, as the bench's client reads it.
func TestFloorTableStoresTheDecision(t *testing.T) {
	url := dbtest.URL(t)
	base := floorUnderTest(t, floorTable, url, nil)
	c := newClient(base, "floor-token-000001", 1, observeSubmit)
	v, err := c.review(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "accepted" || v.DecidedAt == nil || v.DecidedAt.Before(v.SubmittedAt) {
		t.Fatalf("view %+v, want accepted, decided at or after its submission", v)
	}
	pool := dbtest.PoolOn(t, url, nil)
	var state string
	var attempts int
	var decided *time.Time
	if err := pool.QueryRow(context.Background(), `SELECT state, attempts, updated_at FROM review WHERE id = $1`, c.id(1)).
		Scan(&state, &attempts, &decided); err != nil {
		t.Fatal(err)
	}
	if state != "accepted" || attempts != 1 || decided == nil {
		t.Errorf("stored %s, %d attempts, decided at %v; want accepted, 1 attempt, a decision time", state, attempts, decided)
	}
	// A second submit of the review fails its insert, and says so.
	if status, body := postFloor(t, base, "floor-token-000001", `{"review_id":"`+c.id(1)+`"}`); status != http.StatusInternalServerError || !strings.Contains(body, "insert") {
		t.Errorf("a review submitted twice: HTTP %d %s, want 500 naming the insert", status, body)
	}
}

// Nothing stored: the floor answers from the provider alone.
func TestFloorAPIStoresNothing(t *testing.T) {
	base := floorUnderTest(t, floorAPI, "", nil)
	c := newClient(base, "floor-token-000001", 1, observeSubmit)
	v, err := c.review(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	if v.State != "accepted" || v.DecidedAt == nil {
		t.Errorf("view %+v, want accepted with a decision time", v)
	}
}

// A submit without the token, without a review, or whose provider answers
// no decision is refused, never answered as decided.
func TestFloorRefusesWhatItCannotDecide(t *testing.T) {
	base := floorUnderTest(t, floorAPI, "", nil)
	if status, body := postFloor(t, base, "", `{"review_id":"a"}`); status != http.StatusUnauthorized {
		t.Errorf("no token: HTTP %d %s, want 401", status, body)
	}
	if status, body := postFloor(t, base, "floor-token-000001", `{"content":"x"}`); status != http.StatusBadRequest || !strings.Contains(body, "review_id") {
		t.Errorf("no review_id: HTTP %d %s, want 400 naming review_id", status, body)
	}
	undecided := floorUnderTest(t, floorAPI, "", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"review_id":"a","state":"pending"}`))
	}))
	if status, body := postFloor(t, undecided, "floor-token-000001", `{"review_id":"a"}`); status != http.StatusBadGateway {
		t.Errorf("a provider with no decision: HTTP %d %s, want 502", status, body)
	}
	failing := floorUnderTest(t, floorAPI, "", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "overloaded", http.StatusServiceUnavailable)
	}))
	if status, body := postFloor(t, failing, "floor-token-000001", `{"review_id":"a"}`); status != http.StatusBadGateway || !strings.Contains(body, "503") {
		t.Errorf("a provider answering 503: HTTP %d %s, want 502 naming the 503", status, body)
	}
}

// The provider is asked as reviewledger's http provider asks it.
func TestFloorAsksAsReviewledgerDoes(t *testing.T) {
	type asked struct {
		body                        map[string]any
		idempotency, attempt, ctype string
	}
	got := make(chan asked, 1)
	base := floorUnderTest(t, floorAPI, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var a asked
		_ = json.NewDecoder(r.Body).Decode(&a.body)
		a.idempotency, a.attempt, a.ctype = r.Header.Get("Idempotency-Key"), r.Header.Get("X-Review-Attempt"), r.Header.Get("Content-Type")
		got <- a
		_, _ = w.Write([]byte(`{"review_id":"r1","state":"rejected","reasons":["x"]}`))
	}))
	status, body := postFloor(t, base, "floor-token-000001", `{"review_id":"r1","content_class":"bench","content_type":"text/plain","content":"hello"}`)
	if status != http.StatusOK || !strings.Contains(body, `"state":"rejected"`) {
		t.Fatalf("HTTP %d %s, want 200 with the provider's rejection", status, body)
	}
	a := <-got
	want := map[string]any{"review_id": "r1", "attempt": float64(1), "content_class": "bench", "content_type": "text/plain", "content": "hello"}
	if !reflect.DeepEqual(a.body, want) || a.idempotency != "r1" || a.attempt != "1" || a.ctype != "application/json" {
		t.Errorf("asked %+v, want body %v with Idempotency-Key r1, X-Review-Attempt 1, JSON", a, want)
	}
}

// A floor round runs the floor as a process of its own, on a database of
// its own, and measures every review decided; the process ends cleanly
// on SIGTERM (a non-zero exit would fail the round).
func TestFloorRoundsRunTheirOwnProcess(t *testing.T) {
	dbtest.URL(t) // PostgreSQL is there, or the test says why not
	cfg := Config{AdminURL: envOr("TEST_DATABASE_URL", dbtest.DefaultURL), Reviews: 30, Clients: 3, CRUDClients: 2, Timeout: time.Minute, Observe: observeSubmit}
	for _, mode := range []string{floorAPI, floorTable} {
		f, err := floorRound(context.Background(), cfg, mode)
		if err != nil {
			t.Fatalf("floor %s: %v", mode, err)
		}
		if f.Reviews != 30 || f.PerSecond <= 0 || f.P50 < 0 || f.P99 < f.P50 {
			t.Errorf("floor %s: %+v, want 30 reviews at a rate, p99 >= p50", mode, f)
		}
	}
}

func TestFloorServeNamesABadMode(t *testing.T) {
	for _, args := range [][]string{{"crud", "4"}, {floorTable}, {floorTable, "none"}, {floorAPI, "0"}} {
		if got := floorServe(args); got != 2 {
			t.Errorf("floorServe(%q) = %d, want 2", args, got)
		}
	}
	if _, err := newFloor(context.Background(), floorAPI, "", "", "t", 1); err == nil || !strings.Contains(err.Error(), "REVIEWLEDGER_PROVIDER_URL") {
		t.Errorf("no provider URL: %v, want an error naming REVIEWLEDGER_PROVIDER_URL", err)
	}
}

// The report prints the floors by round and their medians beside
// reviewledger's ratio.
func TestReportPrintsTheFloors(t *testing.T) {
	cpu := func(server, pg, bench time.Duration) cpuShare {
		return cpuShare{Server: server * time.Microsecond, Postgres: pg * time.Microsecond, Bench: bench * time.Microsecond}
	}
	rd := func(rl, api, table float64) round {
		return round{rl: figures{PerSecond: rl, Elapsed: time.Second, CPU: cpu(300, 200, 100)},
			crud: figures{PerSecond: 1000, CPU: cpu(0, 300, 100)},
			api:  &figures{PerSecond: api, CPU: cpu(100, 0, 100)}, table: &figures{PerSecond: table, CPU: cpu(300, 400, 200)}}
	}
	rep := &report{cfg: Config{Reviews: 10, Clients: 1, CRUDClients: 1, Observe: observeSubmit},
		rounds: []round{rd(600, 2000, 500), rd(700, 2400, 450), rd(650, 2200, 520)}}
	var b strings.Builder
	rep.print(&b)
	out := b.String()
	for _, want := range []string{
		"  1: nothing stored 2000/s 2.000 ",
		"; CRUD table 450/s 0.450 ",
		"floors, medians of the rounds: nothing stored 2.200, CRUD table behind the API 0.500, reviewledger 0.650 (ratios to CRUD); reviewledger to the CRUD table behind the API 1.250",
		"CPU per review, every process, medians of the rounds: nothing stored 0.20ms, CRUD table behind the API 0.90ms, reviewledger 0.60ms, CRUD 0.40ms",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	rep.rounds = []round{{rl: figures{PerSecond: 1}, crud: figures{PerSecond: 1}}}
	b.Reset()
	rep.print(&b)
	if strings.Contains(b.String(), "floors") {
		t.Errorf("floors printed for rounds that measured none:\n%s", b.String())
	}
}

// The floors are measured with the submit's own wait: on by default,
// off by default with -observe get, and refused there when asked for.
func TestFloorsNeedTheSubmitsOwnWait(t *testing.T) {
	bin := []string{"-bin", "floor_test.go"}
	if _, err := parseFlags(append(bin, "-floors=maybe")); !errors.Is(err, errFlags) {
		t.Errorf("a malformed flag: %v, want errFlags (the flag package reports it)", err)
	}
	for _, c := range []struct {
		args   []string
		floors bool
		err    string
	}{
		{nil, true, ""},
		{[]string{"-floors=false"}, false, ""},
		{[]string{"-observe", "get"}, false, ""},
		{[]string{"-observe", "get", "-floors"}, false, "-floors"},
		{[]string{"-observe", "get", "-floors=false"}, false, ""},
	} {
		cfg, err := parseFlags(append(bin, c.args...))
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: %v, want an error naming %s", c.args, err, c.err)
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.args, err)
		case c.err == "" && cfg.Floors != c.floors:
			t.Errorf("%q: floors %v, want %v", c.args, cfg.Floors, c.floors)
		}
	}
}
