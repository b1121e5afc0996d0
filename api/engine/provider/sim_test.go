package provider

import (
	"context"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func simFor(t *testing.T, cfg SimConfig) *Sim {
	t.Helper()
	cfg.Sleep = func(context.Context, time.Duration) error { return nil }
	s, err := NewSim(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestSimIsSeeded(t *testing.T) {
	t.Parallel()
	cfg := SimConfig{Seed: 42, TimeoutRate: 0.1, ErrorRate: 0.2, InvalidRate: 0.1}
	a, b := simFor(t, cfg), simFor(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the hanging answers return at once
	for i := range 200 {
		req := Request{ReviewID: "r", Attempt: 1 + i%3}
		ra, rb := a.Call(ctx, req), b.Call(ctx, req)
		if ra.Outcome != rb.Outcome || ra.Classification != rb.Classification || ra.Finding.State != rb.Finding.State {
			t.Fatalf("draw %d differs: %+v vs %+v", i, ra, rb)
		}
	}
}

func TestSimRates(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	callbacks := 0
	signer, _ := NewSigner(testSecret)
	s := simFor(t, SimConfig{
		Seed: 7, TimeoutRate: 0.1, ErrorRate: 0.2, InvalidRate: 0.1, AsyncRate: 0.2, RejectRate: 0.5,
		Signer: signer,
		Deliver: func(_ context.Context, _ string, h http.Header, body []byte) error {
			if _, err := signer.Verify(h, body, time.Now()); err != nil {
				t.Errorf("callback not signed: %v", err)
			}
			mu.Lock()
			callbacks++
			mu.Unlock()
			return nil
		},
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 4000
	counts := map[string]int{}
	for range n {
		r := s.Call(ctx, Request{ReviewID: "r", Attempt: 1, Timeout: time.Second})
		key := r.Outcome.String() + "/" + string(r.Classification)
		if r.Outcome == OutcomeFinding {
			if r.Finding.CheckComplete("r") != nil {
				key = "invalid"
			} else {
				key = "finding/" + string(r.Finding.State)
			}
		}
		counts[key]++
	}
	s.Close()
	near := func(key string, want float64) {
		t.Helper()
		got := float64(counts[key]) / n
		if math.Abs(got-want) > 0.03 {
			t.Errorf("%s: share %.3f, want about %.3f (counts %v)", key, got, want, counts)
		}
	}
	near("failure/"+string(domain.ClassDeadlineExceeded), 0.1)
	near("failure/"+string(domain.ClassProviderUnavailable), 0.2)
	near("invalid", 0.1)
	near("accepted_async/", 0.2)
	near("finding/accepted", 0.2)
	near("finding/rejected", 0.2)
	if callbacks != counts["accepted_async/"] {
		t.Errorf("callbacks = %d, want one per asynchronous answer (%d)", callbacks, counts["accepted_async/"])
	}
}

func TestSimConfigValidate(t *testing.T) {
	t.Parallel()
	bad := []SimConfig{
		{TimeoutRate: -0.1},
		{ErrorRate: 1.5},
		{TimeoutRate: 0.6, ErrorRate: 0.6},
		{AsyncRate: 0.1}, // no callback target
		{MedianLatency: time.Second, P99Latency: time.Millisecond},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) accepted", c)
		}
	}
}
