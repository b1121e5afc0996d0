package uitest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The moderation-team routes of docs/api.md in the fake: requeue (one and
// bulk, with a dry run), claim release, holds, the timeline and the
// server-sent stream of queue changes.

// fakeChange is one entry of the stream of queue changes.
type fakeChange struct {
	ID   int
	Type string
	Data map[string]any
}

// streamControl lets a test break the stream: open streams end, and new
// ones are refused with 503 while refused is set.
type streamControl struct {
	refuse  bool
	cut     chan struct{} // closed to end every open stream
	opened  int           // streams answered 200
	refused int           // streams answered 503
}

// timelineEntry is one entry of GET /v1/reviews/{id}/timeline.
type timelineEntry map[string]any

// emit appends a change to the stream; f.mu is held.
func (f *FakeAPI) emit(typ, id, actor string, data map[string]any) {
	d := map[string]any{"type": typ, "review_id": id, "at": f.now().UTC(), "actor": actor}
	if r, ok := f.reviews[id]; ok {
		d["version"] = r.view.Version
	}
	for k, v := range data {
		d[k] = v
	}
	f.changes = append(f.changes, fakeChange{ID: len(f.changes) + 1, Type: typ, Data: d})
	close(f.changed)
	f.changed = make(chan struct{})
}

// coordinate records a claim, a release or a hold: an event, as the real
// server appends one (it moves the version but not what a decision or a
// requeue is checked against: current), and its timeline entry.
func (r *fakeReview) coordinate(at time.Time, kind, actor string, data map[string]any) {
	ev := map[string]any{"review_id": r.view.ReviewID, "at": at}
	typ := map[string]string{"claimed": "Claimed", "released": "ClaimReleased", "held": "Held", "unheld": "Unheld"}[kind]
	switch kind {
	case "claimed":
		ev = map[string]any{"review_id": r.view.ReviewID, "moderator": actor, "claimed_at": at, "expires_at": data["expires_at"]}
	case "released":
		ev["moderator"], ev["by"], ev["reason"] = data["holder"], actor, data["reason"]
		data = map[string]any{"reason": data["reason"], "detail": "claim of " + data["holder"].(string)}
	case "held":
		ev["by"], ev["note"] = actor, data["note"]
	case "unheld":
		ev["by"] = actor
	}
	r.events = append(r.events, EventJSON{Version: uint64(len(r.events)), Type: typ, RecordedAt: at, Data: ev})
	r.view.Version = uint64(len(r.events) - 1)
	r.item.Version = r.view.Version
	e := timelineEntry{"version": r.view.Version, "at": at, "kind": kind, "actor": actor, "round": r.item.Round}
	for k, v := range data {
		e[k] = v
	}
	r.coord = append(r.coord, e)
}

// SetDue gives id a due time, as a class's manual_sla does.
func (f *FakeAPI) SetDue(id string, due time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews[id].item.DueAt = &due
}

// RequireClaims makes id's class one with `claims: required`.
func (f *FakeAPI) RequireClaims(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews[id].item.Claims = "required"
}

// RefuseStreams ends every open stream and, while on, answers new ones 503.
func (f *FakeAPI) RefuseStreams(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.streams.refuse = on
	if on && f.streams.cut != nil {
		close(f.streams.cut)
		f.streams.cut = nil
	}
}

// StreamCounts returns how many streams of queue changes were answered 200
// and how many 503.
func (f *FakeAPI) StreamCounts() (opened, refused int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.streams.opened, f.streams.refused
}

// InQueue reports whether id is waiting in the manual queue.
func (f *FakeAPI) InQueue(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.queue, id)
}

func (f *FakeAPI) moderationRoutes(mux *http.ServeMux) {
	mod := []string{"moderator"}
	mux.HandleFunc("DELETE /v1/manual-queue/{id}/claim", f.route(mod, f.release))
	mux.HandleFunc("POST /v1/manual-queue/{id}/requeue", f.route(mod, f.requeue))
	mux.HandleFunc("POST /v1/manual-queue/{id}/hold", f.route(mod, f.hold))
	mux.HandleFunc("DELETE /v1/manual-queue/{id}/hold", f.route(mod, f.unhold))
	mux.HandleFunc("POST /v1/manual-queue/bulk/requeue", f.route(mod, f.bulk("requeue")))
	mux.HandleFunc("POST /v1/manual-queue/bulk/release", f.route(mod, f.bulk("release")))
	mux.HandleFunc("GET /v1/reviews/{id}/timeline", f.route([]string{"moderator", "auditor"}, f.timeline))
	mux.HandleFunc("GET /v1/manual-queue/events", f.stream)
}

// claimRefusal is the 409 of a class with `claims: required` for a caller
// without the live claim; f.mu is held.
func (f *FakeAPI) claimRefusal(rv *fakeReview, who fakePrincipal, now time.Time) (int, any, bool) {
	if rv.item.Claims != "required" {
		return 0, nil, false
	}
	it := rv.item
	live := it.ClaimedBy != nil && it.ClaimExpiresAt.After(now)
	switch {
	case !live:
		s, p := problem(http.StatusConflict, "claim-required", "Claim required", "the class "+it.ContentClass+" needs a live claim to decide", "")
		return s, p, true
	case *it.ClaimedBy != who.name:
		s, p := problem(http.StatusConflict, "claimed-by-other", "Claimed by another moderator", "claimed by "+*it.ClaimedBy, "")
		return s, p, true
	}
	return 0, nil, false
}

// queued finds a review waiting in the queue, or the problem to answer.
func (f *FakeAPI) queued(id string) (*fakeReview, int, any) {
	rv, ok := f.reviews[id]
	switch {
	case !ok:
		s, p := problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
		return nil, s, p
	case !slices.Contains(f.queue, id):
		s, p := problem(http.StatusConflict, "not-in-manual-review", "Review is not in manual_review", "", "")
		return nil, s, p
	}
	return rv, 0, nil
}

func (f *FakeAPI) release(_ http.ResponseWriter, r *http.Request, who fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	rv, status, p := f.queued(id)
	if rv == nil {
		return status, p
	}
	outcome := f.releaseLocked(rv, who)
	switch outcome {
	case "not_claimed":
		return problem(http.StatusConflict, "not-claimed", "Not claimed", "", "")
	case "claimed":
		return problem(http.StatusConflict, "claimed-by-other", "Claimed by another moderator", "claimed by "+*rv.item.ClaimedBy, "")
	}
	return http.StatusOK, map[string]any{"review_id": id, "released_by": who.name, "claimed_by": who.name, "version": rv.view.Version}
}

func (f *FakeAPI) releaseLocked(rv *fakeReview, who fakePrincipal) string {
	now := f.now().UTC()
	it := &rv.item
	switch {
	case it.ClaimedBy == nil || !it.ClaimExpiresAt.After(now):
		return "not_claimed"
	case *it.ClaimedBy != who.name && who.role != "admin":
		return "claimed"
	}
	holder := *it.ClaimedBy
	it.ClaimedBy, it.ClaimExpiresAt = nil, nil
	rv.coordinate(now, "released", who.name, map[string]any{"reason": "released", "holder": holder})
	f.emit("released", rv.view.ReviewID, who.name, map[string]any{"claimed_by": holder, "released_by": who.name, "reason": "released"})
	return "released"
}

type requeueBody struct {
	ExpectedVersion *uint64 `json:"expected_version"`
	Note            string  `json:"note"`
}

func (f *FakeAPI) requeue(_ http.ResponseWriter, r *http.Request, who fakePrincipal, body []byte) (int, any) {
	var in requeueBody
	if status, prob, ok := decodeBody(body, &in); !ok {
		return status, prob
	}
	if in.ExpectedVersion == nil {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "expected_version is required", "expected_version")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	rv, status, p := f.queued(id)
	if rv == nil {
		return status, p
	}
	switch f.requeueLocked(rv, who, *in.ExpectedVersion, in.Note) {
	case "conflict":
		return problem(http.StatusConflict, "version-moved", "Review version moved", fmt.Sprintf("expected version %d, the review is at %d", *in.ExpectedVersion, rv.view.Version), "")
	case "claimed":
		return problem(http.StatusConflict, "claimed-by-other", "Claimed by another moderator", "claimed by "+*rv.item.ClaimedBy, "")
	}
	// The review as GET /v1/reviews/{id} answers it, and its round.
	return http.StatusOK, struct {
		ReviewJSON
		Round int `json:"round"`
	}{rv.view, rv.item.Round}
}

// requeueLocked sends a queued review back to the provider: pending, out
// of the queue, a new round.
func (f *FakeAPI) requeueLocked(rv *fakeReview, who fakePrincipal, version uint64, note string) string {
	now := f.now().UTC()
	it := &rv.item
	if rv.raceRequeue {
		rv.raceRequeue = false
		rv.record(now, "ManualApprovalRecorded", map[string]any{"review_id": rv.view.ReviewID, "state": "accepted", "moderator": "carol"})
		rv.view.Version++
		it.Version = rv.view.Version
	}
	switch {
	case !rv.current(version):
		return "conflict"
	case it.ClaimedBy != nil && *it.ClaimedBy != who.name && it.ClaimExpiresAt.After(now):
		return "claimed"
	}
	it.Round++
	it.ClaimedBy, it.ClaimExpiresAt = nil, nil
	deadline := now.Add(30 * time.Second)
	rv.record(now, "Requeued", map[string]any{"review_id": rv.view.ReviewID, "by": who.name, "note": note, "round": it.Round, "deadline": deadline})
	rv.view.Version++
	rv.view.State, rv.view.Deadline = "pending", deadline
	id := rv.view.ReviewID
	f.queue = slices.DeleteFunc(f.queue, func(q string) bool { return q == id })
	f.emit("requeued", id, who.name, map[string]any{"by": who.name, "round": it.Round, "deadline": deadline, "note": note})
	return "requeued"
}

func (f *FakeAPI) hold(_ http.ResponseWriter, r *http.Request, who fakePrincipal, body []byte) (int, any) {
	var in struct {
		Note string `json:"note"`
	}
	if status, prob, ok := decodeBody(body, &in); !ok {
		return status, prob
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	rv, status, p := f.queued(id)
	if rv == nil {
		return status, p
	}
	if in.Note == "" {
		return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "note: is required: why the review waits", "note")
	}
	if rv.item.Held {
		return problem(http.StatusConflict, "already-held", "Already on hold", "", "")
	}
	now := f.now().UTC()
	by, note := who.name, in.Note
	rv.item.Held, rv.item.HeldBy, rv.item.HeldAt, rv.item.HoldNote = true, &by, &now, &note
	rv.coordinate(now, "held", by, map[string]any{"note": note})
	f.emit("held", id, by, map[string]any{"held_by": by, "note": note})
	return http.StatusOK, map[string]any{"review_id": id, "held": true, "held_by": by, "held_at": now, "hold_note": note, "version": rv.view.Version}
}

func (f *FakeAPI) unhold(_ http.ResponseWriter, r *http.Request, who fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	rv, status, p := f.queued(id)
	if rv == nil {
		return status, p
	}
	if !rv.item.Held {
		return problem(http.StatusConflict, "not-held", "Not on hold", "", "")
	}
	now := f.now().UTC()
	rv.item.Held, rv.item.HeldBy, rv.item.HeldAt, rv.item.HoldNote = false, nil, nil, nil
	rv.coordinate(now, "unheld", who.name, nil)
	f.emit("unheld", id, who.name, map[string]any{"by": who.name})
	return http.StatusOK, map[string]any{"review_id": id, "held": false, "held_by": nil, "held_at": nil, "hold_note": nil, "version": rv.view.Version}
}

type bulkBody struct {
	Filter *struct {
		ContentClass string `json:"content_class"`
		Reason       string `json:"reason"`
		ClaimedBy    string `json:"claimed_by"`
	} `json:"filter"`
	Items []struct {
		ReviewID        string  `json:"review_id"`
		ExpectedVersion *uint64 `json:"expected_version"`
	} `json:"items"`
	Note   string `json:"note"`
	DryRun bool   `json:"dry_run"`
	Limit  int    `json:"limit"`
	Cursor string `json:"cursor"`
}

// bulk answers POST /v1/manual-queue/bulk/{requeue,release}: a selection
// by filter (paged in review ID order) or by items, a dry run's total, or
// each item's outcome.
func (f *FakeAPI) bulk(action string) fakeHandler {
	return func(_ http.ResponseWriter, _ *http.Request, who fakePrincipal, body []byte) (int, any) {
		var in bulkBody
		if status, prob, ok := decodeBody(body, &in); !ok {
			return status, prob
		}
		if (in.Filter == nil) == (len(in.Items) == 0) {
			return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "exactly one of filter and items", "filter")
		}
		if in.Filter != nil && in.Filter.ClaimedBy != "" && action != "release" {
			return problem(http.StatusBadRequest, "invalid-request", "Invalid request", "claimed_by filters a release only", "filter.claimed_by")
		}
		if in.Limit == 0 {
			in.Limit = 100
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		if in.Filter != nil && in.Filter.ContentClass != "" && len(f.classes) > 0 && !slices.Contains(f.classes, in.Filter.ContentClass) {
			return problem(http.StatusUnprocessableEntity, "unknown-class", "Unknown content class",
				fmt.Sprintf("filter.content_class: unknown content class %q", in.Filter.ContentClass), "filter.content_class")
		}
		type pick struct {
			id      string
			version *uint64
		}
		var picks []pick
		if in.Filter != nil {
			for _, id := range f.queue {
				it := f.reviews[id].item
				if it.Held || (in.Filter.ContentClass != "" && it.ContentClass != in.Filter.ContentClass) || (in.Filter.Reason != "" && it.Reason != in.Filter.Reason) {
					continue
				}
				if c := in.Filter.ClaimedBy; c != "" && (it.ClaimedBy == nil || *it.ClaimedBy != c || !it.ClaimExpiresAt.After(f.now())) {
					continue
				}
				picks = append(picks, pick{id: id})
			}
			sort.Slice(picks, func(i, j int) bool { return picks[i].id < picks[j].id })
		} else {
			for _, it := range in.Items {
				picks = append(picks, pick{id: it.ReviewID, version: it.ExpectedVersion})
			}
		}
		total := len(picks)
		if in.DryRun {
			return http.StatusOK, map[string]any{"dry_run": true, "total": total, "items": []any{}, "counts": map[string]int{}, "next_cursor": nil}
		}
		var next any
		if in.Filter != nil {
			picks = slices.DeleteFunc(picks, func(p pick) bool { return p.id <= in.Cursor })
			if len(picks) > in.Limit {
				picks = picks[:in.Limit]
				next = picks[len(picks)-1].id
			}
		}
		counts := map[string]int{}
		items := []map[string]any{}
		for _, p := range picks {
			outcome := "not_found"
			rv, ok := f.reviews[p.id]
			switch {
			case !ok:
			case !slices.Contains(f.queue, p.id):
				outcome = "moved_on"
			case action == "release":
				outcome = f.releaseLocked(rv, who)
			default:
				v := rv.view.Version
				if p.version != nil {
					v = *p.version
				}
				outcome = f.requeueLocked(rv, who, v, in.Note)
			}
			counts[outcome]++
			item := map[string]any{"review_id": p.id, "outcome": outcome}
			switch outcome {
			case "requeued", "released":
				item["version"] = rv.view.Version
			default:
				item["detail"] = fmt.Sprintf("review %q: %s", p.id, strings.ReplaceAll(outcome, "_", " "))
			}
			items = append(items, item)
		}
		return http.StatusOK, map[string]any{"dry_run": false, "total": total, "counts": counts, "items": items, "next_cursor": next}
	}
}

// timeline is GET /v1/reviews/{id}/timeline, built from the fake's events
// and its claims and holds.
func (f *FakeAPI) timeline(_ http.ResponseWriter, r *http.Request, _ fakePrincipal, _ []byte) (int, any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv, ok := f.reviews[r.PathValue("id")]
	if !ok {
		return problem(http.StatusNotFound, "review-not-found", "Review not found", "", "")
	}
	var out []timelineEntry
	round := 1
	var open timelineEntry
	for _, e := range rv.events {
		d := e.Data
		switch e.Type {
		case "Submitted":
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "submitted", "round": round, "actor": d["submitted_by"], "deadline": d["deadline"]})
		case "AttemptStarted":
			open = timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "attempt", "round": round, "attempt": d["attempt"], "outcome": "in_flight"}
			out = append(out, open)
		case "AttemptTimedOut":
			if open != nil {
				open["outcome"], open["classification"], open["duration_ms"], open["ended_at"] = "failed", d["classification"], d["elapsed_ms"], e.RecordedAt
				if det, ok := d["detail"]; ok {
					open["detail"] = det
				}
			}
		case "FindingReceived":
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "attempt", "round": round, "attempt": d["attempt"], "outcome": "finding", "state": d["state"], "duration_ms": d["elapsed_ms"]})
		case "Escalated":
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "escalated", "round": round, "actor": "system", "reason": d["reason"], "state": d["state"]})
		case "Requeued":
			round++
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "requeued", "round": round, "actor": d["by"], "note": d["note"], "deadline": d["deadline"]})
		case "ManualApprovalRecorded":
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "approval", "round": round, "actor": d["moderator"], "state": d["state"], "note": d["note"]})
		case "ManualDecisionRecorded":
			out = append(out, timelineEntry{"version": e.Version, "at": e.RecordedAt, "kind": "decided", "round": round, "actor": d["moderator"], "state": d["state"], "note": d["note"]})
		}
	}
	out = append(out, rv.coord...)
	sort.SliceStable(out, func(i, j int) bool {
		ai, aj := out[i]["at"].(time.Time), out[j]["at"].(time.Time)
		return ai.Before(aj) || ai.Equal(aj) && out[i]["version"].(uint64) < out[j]["version"].(uint64)
	})
	return http.StatusOK, map[string]any{"review_id": rv.view.ReviewID, "state": rv.view.State, "content_class": rv.view.ContentClass,
		"version": rv.view.Version, "round": round, "entries": out}
}

// stream is GET /v1/manual-queue/events: the changes after Last-Event-ID,
// "ready", then each change as it is made, with a heartbeat comment.
func (f *FakeAPI) stream(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqSeq++
	f.requests = append(f.requests, FakeRequest{Method: r.Method, Path: r.URL.Path, Query: r.URL.Query(), Auth: r.Header.Get("Authorization"), LastEventID: r.Header.Get("Last-Event-ID")})
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	who, known := f.tokens[token]
	refuse := f.streams.refuse
	if !known || (who.role != "moderator" && who.role != "admin") || refuse {
		if refuse {
			f.streams.refused++
		}
		f.mu.Unlock()
		status, kind := http.StatusServiceUnavailable, "stream-unavailable"
		if !known {
			status, kind = http.StatusUnauthorized, "unauthenticated"
		} else if !refuse {
			status, kind = http.StatusForbidden, "forbidden"
		}
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(problemJSON{Type: "urn:reviewledger:problem:" + kind, Title: kind, Status: status})
		return
	}
	f.streams.opened++
	if f.streams.cut == nil {
		f.streams.cut = make(chan struct{})
	}
	cut := f.streams.cut
	next := len(f.changes)
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		n, err := strconv.Atoi(last)
		if err != nil {
			f.mu.Unlock()
			http.Error(w, "bad Last-Event-ID", http.StatusBadRequest)
			return
		}
		next = n
	}
	f.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	flush := func() {
		if flusher != nil {
			flusher.Flush()
		}
	}
	ready := false
	heartbeat := time.NewTicker(2 * time.Second)
	defer heartbeat.Stop()
	for {
		f.mu.Lock()
		pending := slices.Clone(f.changes[min(next, len(f.changes)):])
		changed := f.changed
		f.mu.Unlock()
		for _, c := range pending {
			data, _ := json.Marshal(c.Data)
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", c.ID, c.Type, data); err != nil {
				return
			}
			next = c.ID
		}
		if !ready {
			ready = true
			_, _ = fmt.Fprint(w, "event: ready\ndata: {}\n\n")
		}
		flush()
		select {
		case <-changed:
		case <-heartbeat.C:
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			flush()
		case <-cut:
			return
		case <-r.Context().Done():
			return
		}
	}
}

// EscalateAgain ends a requeued review's new round without a finding:
// its attempts fail as classification says and it returns to the queue.
func (f *FakeAPI) EscalateAgain(id, reason, classification string, attempts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv := f.reviews[id]
	now := f.now().UTC()
	start := now.Add(-time.Duration(attempts) * 2 * time.Second)
	for i := 1; i <= attempts; i++ {
		n := rv.view.Attempts + 1
		at := start.Add(time.Duration(i-1) * 2 * time.Second)
		rv.record(at, "AttemptStarted", map[string]any{"review_id": id, "attempt": n, "attempt_timeout_ms": 10000})
		rv.record(at.Add(700*time.Millisecond), "AttemptTimedOut", map[string]any{"review_id": id, "attempt": n, "classification": classification, "elapsed_ms": 700, "detail": "HTTP 503"})
		rv.view.Attempts = n
	}
	rv.record(now, "Escalated", map[string]any{"review_id": id, "reason": reason, "state": "manual_review", "attempts": rv.view.Attempts})
	rv.view.Version = uint64(len(rv.events) - 1)
	rv.view.State = "manual_review"
	it := &rv.item
	it.Reason, it.Attempts, it.EscalatedAt, it.Version = reason, rv.view.Attempts, now, rv.view.Version
	f.queue = append(f.queue, id)
	f.emit("added", id, "system", map[string]any{"item": f.itemNow(rv, now)})
}

// RequeueAs sends id back to automated review as moderator would.
func (f *FakeAPI) RequeueAs(id, moderator, note string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	rv := f.reviews[id]
	f.requeueLocked(rv, fakePrincipal{role: "moderator", name: moderator}, rv.view.Version, note)
}

// RaceNextRequeue makes another moderator's vote land on id just before
// the next requeue of it is applied, as a concurrent append would: that
// requeue, sent with the version the page saw, conflicts.
func (f *FakeAPI) RaceNextRequeue(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reviews[id].raceRequeue = true
}
