package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// streamEvent is one server-sent event of GET /v1/manual-queue/events.
type streamEvent struct {
	ID, Event string
	Data      struct {
		Type     string `json:"type"`
		ReviewID string `json:"review_id"`
		Version  uint64 `json:"version"`
		Round    int    `json:"round"`
		By       string `json:"by"`
		Claimed  string `json:"claimed_by"`
		Item     *struct {
			ReviewID string `json:"review_id"`
			Reason   string `json:"reason"`
		} `json:"item"`
	}
}

// openQueueStream reads the queue's event stream of p as a moderator,
// from lastID when not empty; events arrive on the channel.
func openQueueStream(t *testing.T, p *serveProc, lastID string) (<-chan streamEvent, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/v1/manual-queue/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tokModerator)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req) //nolint:bodyclose // read by the goroutine below, which closes it
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("queue stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	out := make(chan streamEvent, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		var ev streamEvent
		var data string
		for sc.Scan() {
			switch line := sc.Text(); {
			case line == "" && ev.Event != "":
				_ = json.Unmarshal([]byte(data), &ev.Data)
				out <- ev
				ev, data = streamEvent{}, ""
			case strings.HasPrefix(line, "id: "):
				ev.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				data = line[6:]
			}
		}
	}()
	t.Cleanup(cancel)
	return out, cancel
}

// nextOf returns the next event of the given type for the review, skipping
// the others.
func nextOf(t *testing.T, events <-chan streamEvent, typ, id string) streamEvent {
	t.Helper()
	timeout := time.After(e2eWait)
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatalf("the stream ended before a %s of %s", typ, id)
			}
			if ev.Event == typ && (id == "" || ev.Data.ReviewID == id) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s of %s within %s", typ, id, e2eWait)
		}
	}
}

// TestE2EQueueStreamAcrossProcesses: two serve processes on one database.
// The queue stream of one shows what the other does (a review escalated
// by an outage, claimed, requeued), and a stream resumed with
// Last-Event-ID gets what happened while it was gone; the recovered
// provider decides the requeued review in its second round.
func TestE2EQueueStreamAcrossProcesses(t *testing.T) {
	t.Parallel()
	prov := newScriptedProvider(t)
	env := baseServeEnv(t, dbtest.URL(t), prov.URL())
	acting, watching := startServe(t, env), startServe(t, env)
	prov.setTarget(acting.URL)
	const id = "stream-across-1"
	prov.script(id, status(http.StatusServiceUnavailable, ""), status(http.StatusServiceUnavailable, ""),
		status(http.StatusServiceUnavailable, ""), accept())

	events, stop := openQueueStream(t, watching, "")
	nextOf(t, events, "ready", "")
	acting.submit(t, id, "e2e_fast", content(id))
	added := nextOf(t, events, "added", id)
	if added.Data.Item == nil || added.Data.Item.Reason != "attempts_exhausted" {
		t.Fatalf("added %+v", added)
	}
	acting.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+id+"/claim", tokModerator, nil)
	claimed := nextOf(t, events, "claimed", id)
	if claimed.Data.Claimed != "mona" || claimed.ID == "" {
		t.Fatalf("claimed %+v", claimed)
	}
	stop()

	// While nobody watches: the claim's holder sends the review back to
	// the provider, with the version it read before the claim.
	acting.expect(t, http.StatusOK, http.MethodPost, "/v1/manual-queue/"+id+"/requeue", tokModerator,
		map[string]any{"expected_version": added.Data.Version, "note": "provider back"})
	resumed, _ := openQueueStream(t, watching, claimed.ID)
	requeued := nextOf(t, resumed, "requeued", id)
	if requeued.Data.Round != 2 || requeued.Data.By != "mona" {
		t.Fatalf("requeued %+v", requeued)
	}
	if v := acting.waitSettled(t, id); v.State != "accepted" || v.Attempts != 4 {
		t.Fatalf("after the requeue: %+v", v)
	}
	if calls := prov.seen(id); len(calls) != 4 || calls[3].Attempt != "4" {
		t.Fatalf("provider saw %d calls, the last %+v", len(calls), calls[len(calls)-1])
	}
	if code, out, errOut := acting.cli(t, "audit", "verify", "--review", id); code != 0 {
		t.Fatalf("audit verify: %d %s %s", code, out, errOut)
	}
	if code, out, _ := acting.cli(t, "replay", id); code != 0 || !strings.Contains(out, "Requeued") || !strings.Contains(out, "Claimed") {
		t.Fatalf("replay: %d\n%s", code, out)
	}
}
