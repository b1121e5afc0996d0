package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenLoopCountsWhatItCouldNotSend: with the service not answering,
// an open loop keeps at most its limit of reviews in flight and counts
// the arrivals beyond it instead of sending them; once the service
// answers, the reviews sent are decided and their latencies returned.
func TestOpenLoopCountsWhatItCouldNotSend(t *testing.T) {
	release := make(chan struct{})
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received.Add(1)
		<-release
		now := time.Now().UTC()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_ = json.NewEncoder(w).Encode(map[string]any{"state": "accepted", "submitted_at": now, "decided_at": now})
	}))
	defer srv.Close()
	c := newClient(srv.URL, "token", 4, observeSubmit)
	const limit = 3
	arrivals := 0
	// The first arrivals take every slot and wait for release, so every
	// later arrival before the 300th finds the limit reached; then the service
	// answers.
	start := time.Now()
	latencies, behind, err := openLoopUntil(context.Background(), c, 0, 5000, limit, func(time.Time) bool {
		arrivals++
		if arrivals == 300 {
			close(release)
		}
		return arrivals > 400
	})
	if err != nil {
		t.Fatal(err)
	}
	if behind.n < 299-limit || int(received.Load()) != len(latencies) || len(latencies)+behind.n != 400 {
		t.Fatalf("%d decided, %d not sent, %d received; want every one of the 400 arrivals either sent and decided or counted, some counted", len(latencies), behind.n, received.Load())
	}
	// When they were due: within the run, the first before the last (some
	// 300 arrivals at 5,000 a second are not all due at once).
	if behind.first.Before(start) || !behind.last.After(behind.first) {
		t.Errorf("unsent arrivals due from %s to %s; want within the run, from %s", behind.first, behind.last, start)
	}
}

func TestUnsentSaysWhenTheyWereDue(t *testing.T) {
	var u unsent
	for _, s := range []int{3, 5, 7} {
		u.add(time.Date(2026, 12, 7, 15, 12, s, 0, time.FixedZone("CET", 3600)))
	}
	if got, want := u.String(), "3, due from 14:12:03 to 14:12:07 UTC"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
