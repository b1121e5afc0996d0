package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/queuefeed"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

type sseEvent struct {
	id, event, data string
	comment         bool
}

// sseClient reads a server-sent-events stream line by line.
type sseClient struct {
	t      *testing.T
	resp   *http.Response
	events chan sseEvent
}

func openStream(t *testing.T, url, token, lastID string) *sseClient {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url+"/v1/manual-queue/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Accept", "text/event-stream")
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // read by the goroutine below, closed by t.Cleanup
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	c := &sseClient{t: t, resp: resp, events: make(chan sseEvent, 100)}
	go func() {
		defer close(c.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev != (sseEvent{}) {
					c.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				c.events <- sseEvent{comment: true, data: line}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	t.Cleanup(func() { _ = resp.Body.Close() })
	return c
}

// next returns the next event that is not a comment (a retry-only block
// included), failing after a generous safety wait.
func (c *sseClient) next() sseEvent {
	c.t.Helper()
	for {
		select {
		case ev, ok := <-c.events:
			if !ok {
				c.t.Fatal("stream ended")
			}
			if !ev.comment && ev.event != "" {
				return ev
			}
		case <-time.After(20 * time.Second):
			c.t.Fatal("no event")
		}
	}
}

func (c *sseClient) change() queuefeed.Change {
	c.t.Helper()
	ev := c.next()
	var ch queuefeed.Change
	if err := json.Unmarshal([]byte(ev.data), &ch); err != nil || ch.Type != ev.event || ev.id == "" {
		c.t.Fatalf("event %+v: %v", ev, err)
	}
	ch.Position, _ = queuefeed.ParseID(ev.id)
	return ch
}

func TestQueueEvents(t *testing.T) {
	var feed *queuefeed.Feed
	h := newHarness(t, func(c *Config, d *Deps) {
		l := d.Ledger.(*ledger.Ledger)
		// A buffer of three changes: a resumed stream reads the ledger.
		feed = queuefeed.New(l.Store(), l, queuefeed.Config{Buffer: 3})
		d.Feed = feed
		c.QueueHeartbeat = 50 * time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = feed.Follow(ctx) }()
	srv := httptest.NewServer(h.srv.Handler())
	defer srv.Close()

	wantProblem(t, h.do("GET", "/v1/manual-queue/events", auditorToken, ""), http.StatusForbidden, "forbidden", "")
	wantProblem(t, h.do("GET", "/v1/manual-queue/events", moderatorToken, "", "Last-Event-ID", "yesterday"), http.StatusBadRequest, "invalid-request", "Last-Event-ID")
	wantProblem(t, h.do("GET", "/v1/manual-queue/events?last_event_id=1-x", moderatorToken, ""), http.StatusBadRequest, "invalid-request", "Last-Event-ID")

	h.submit("r1", "caption_suggestion", "x")
	s := openStream(t, srv.URL, moderatorToken, "")
	if ev := s.next(); ev.event != "ready" || !strings.Contains(ev.data, `"position"`) {
		t.Fatalf("first event %+v", ev)
	}
	h.escalate("r1", domain.ReasonBudgetExhausted)
	v := h.version("r1")
	for _, req := range []struct{ method, path, token, body string }{
		{"POST", "/v1/manual-queue/r1/claim", moderatorToken, ""},
		{"POST", "/v1/manual-queue/r1/hold", moderatorToken, `{"note":"legal"}`},
		{"DELETE", "/v1/manual-queue/r1/hold", moderatorToken, ""},
		{"DELETE", "/v1/manual-queue/r1/claim", moderatorToken, ""},
		{"POST", "/v1/manual-queue/r1/requeue", moderator2, requeueJSON(v, "back")},
	} {
		if rec := h.do(req.method, req.path, req.token, req.body); rec.Code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", req.method, req.path, rec.Code, rec.Body)
		}
	}
	h.escalate("r1", domain.ReasonProviderRefused)
	if rec := h.do("POST", "/v1/reviews/r1/decision", moderatorToken, decisionJSON("rejected", h.version("r1"), "")); rec.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", rec.Code, rec.Body)
	}
	var got []queuefeed.Change
	for range 8 {
		got = append(got, s.change())
	}
	var types []string
	for _, ch := range got {
		types = append(types, ch.Type)
	}
	if want := "added claimed held unheld released requeued added decided"; strings.Join(types, " ") != want {
		t.Fatalf("changes %v, want %s", types, want)
	}
	added, claimed, held, requeued := got[0], got[1], got[2], got[5]
	if added.Item == nil || added.Item.ReviewID != "r1" || added.Item.Reason != "budget_exhausted" || added.Item.Version != added.Version {
		t.Fatalf("added %+v", added)
	}
	if claimed.ClaimedBy != "mona" || claimed.ClaimExpiresAt == nil || claimed.Actor != "mona" {
		t.Fatalf("claimed %+v", claimed)
	}
	if held.HeldBy != "mona" || held.Note != "legal" || requeued.By != "max" || requeued.Round != 2 || got[7].State != "rejected" || got[6].Item.Round != 2 {
		t.Fatalf("held %+v requeued %+v", held, requeued)
	}
	// A quiet stream sends heartbeats.
	for {
		ev, ok := <-s.events
		if !ok {
			t.Fatal("stream ended")
		}
		if ev.comment && ev.data == ": heartbeat" {
			break
		}
	}

	// Resumed after the claim: everything after it, read from the ledger
	// (the buffer holds only the last three), then ready.
	r := openStream(t, srv.URL, moderatorToken, queuefeed.FormatID(claimed.Position))
	for i, want := range []string{"held", "unheld", "released", "requeued", "added", "decided"} {
		ch := r.change()
		if ch.Type != want || ch.Position != got[i+2].Position {
			t.Fatalf("resumed change %d: %s at %v, want %s at %v", i, ch.Type, ch.Position, want, got[i+2].Position)
		}
	}
	if ev := r.next(); ev.event != "ready" {
		t.Fatalf("after the catch-up: %+v", ev)
	}
	// Closing the server ends the streams.
	h.srv.Close()
	for range s.events {
	}
	for range r.events {
	}
}

// TestQueueStreamOutlivesTimeouts: a stream lasts past the server's read
// and write timeouts, heartbeat after heartbeat.
func TestQueueStreamOutlivesTimeouts(t *testing.T) {
	var feed *queuefeed.Feed
	h := newHarness(t, func(c *Config, d *Deps) {
		l := d.Ledger.(*ledger.Ledger)
		feed = queuefeed.New(l.Store(), l, queuefeed.Config{})
		d.Feed = feed
		c.QueueHeartbeat = 20 * time.Millisecond
		c.ReadTimeout, c.WriteTimeout = 100*time.Millisecond, 100*time.Millisecond
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = feed.Follow(ctx) }()
	ts := httptest.NewUnstartedServer(h.srv.Handler())
	ts.Config = h.srv.HTTPServer("")
	ts.Start()
	defer ts.Close()
	defer h.srv.Close()
	s := openStream(t, ts.URL, moderatorToken, "")
	if ev := s.next(); ev.event != "ready" {
		t.Fatalf("first event %+v", ev)
	}
	started := time.Now()
	beats := 0
	for beats < 5 || time.Since(started) < 300*time.Millisecond {
		ev, ok := <-s.events
		if !ok {
			t.Fatalf("the stream ended after %d heartbeats", beats)
		}
		if ev.comment {
			beats++
		}
	}
	h.submit("r1", "caption_suggestion", "x")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	if ch := s.change(); ch.Type != queuefeed.Added || ch.ReviewID != "r1" {
		t.Fatalf("change after the timeouts: %+v", ch)
	}
}
