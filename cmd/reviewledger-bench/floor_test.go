package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

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
	f, err := newFloor(context.Background(), mode, dbURL, provURL, "floor-token-000001", 4)
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
	if err := pool.QueryRow(context.Background(), `SELECT state, attempts, decided_at FROM floor_review WHERE id = $1`, c.id(1)).
		Scan(&state, &attempts, &decided); err != nil {
		t.Fatal(err)
	}
	if state != "accepted" || attempts != 1 || decided == nil {
		t.Errorf("stored %s, %d attempts, decided at %v; want accepted, 1 attempt, a decision time", state, attempts, decided)
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
}

func TestFloorServeNamesABadMode(t *testing.T) {
	if got := floorServe([]string{"crud"}); got != 2 {
		t.Errorf("floorServe(crud) = %d, want 2", got)
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
		"floors, medians of the rounds: nothing stored 2.200, CRUD table behind the API 0.500, reviewledger 0.650",
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

func TestFloorsNeedTheSubmitsOwnWait(t *testing.T) {
	cfg := Config{Bin: "floor_test.go", Reviews: 1, Clients: 1, CRUDClients: 1, Rounds: 1, Timeout: time.Second, Observe: observeGet, Floors: true}
	if err := cfg.validate(); err == nil || !strings.Contains(err.Error(), "-floors") {
		t.Errorf("floors with -observe get: %v, want an error naming -floors", err)
	}
	cfg.Floors = false
	if err := cfg.validate(); err != nil {
		t.Errorf("-observe get without floors: %v", err)
	}
}
