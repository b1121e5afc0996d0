package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/domain"
)

// callbackAnswer names what HandleCallback answered: applied, conflict, or the
// error's text.
func callbackAnswer(err error) string {
	switch {
	case err == nil:
		return "applied"
	case errors.Is(err, ErrConflictingCompletion):
		return "conflict"
	default:
		return err.Error()
	}
}

// storm delivers each of webhooks to id, every delivery at the same
// moment (they start together), and returns the answers in order.
func storm(h *harness, id string, webhooks []func() error) []string {
	answers := make([]string, len(webhooks))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, deliver := range webhooks {
		wg.Go(func() {
			<-start
			answers[i] = callbackAnswer(deliver())
		})
	}
	close(start)
	wg.Wait()
	return answers
}

// sameFindingStorm: for each of reviews parked for their callback, a storm
// of signed callbacks with one finding, each under a webhook-id of its
// own, all at once: every one is answered applied, the finding is recorded once,
// and no conflict is recorded or counted, whichever wins the append and
// however the others lose it (the review moved on before they loaded it,
// or their append failed its expected-revision check). A callback with the
// same finding under another webhook-id, later, is answered applied too.
func sameFindingStorm(t *testing.T, h *harness, reviews, webhooks int) {
	t.Helper()
	ctx := context.Background()
	for r := range reviews {
		id := fmt.Sprintf("rev-same-%d", r)
		h.submit(t, id, "c")
		h.workOnce(t, id)
		deliveries := make([]func() error, webhooks)
		for w := range deliveries {
			hdr, body := h.signedFinding(id, 1, "rejected", []string{"spam", "lang:en"}, fmt.Sprintf("%s-msg-%d", id, w))
			deliveries[w] = func() error { return h.HandleCallback(ctx, id, hdr, body) }
		}
		for w, a := range storm(h, id, deliveries) {
			if a != "applied" {
				t.Fatalf("%s: webhook %d answered %s, want applied: its finding is the one recorded", id, w, a)
			}
		}
		hdr, body := h.signedFinding(id, 1, "rejected", []string{"spam", "lang:en"}, id+"-later")
		if err := h.HandleCallback(ctx, id, hdr, body); err != nil {
			t.Fatalf("%s: the same finding under another webhook-id, later: %v, want applied", id, err)
		}
		want := []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}
		if got := h.types(t, id); !slices.Equal(got, want) {
			t.Fatalf("%s: events %v, want %v", id, got, want)
		}
		if got := h.conflicts(t, id); len(got) != 0 {
			t.Fatalf("%s: conflicts recorded for the recorded finding: %v", id, got)
		}
	}
	if n := h.counter(t, h.metrics.conflicts.WithLabelValues(domain.SourceCallback)); n != 0 {
		t.Errorf("%v callback conflicts counted, want 0", n)
	}
}

func TestSameFindingStorm(t *testing.T) {
	t.Parallel()
	sameFindingStorm(t, newHarness(t, []step{async}), 60, 8)
}

// TestSameFindingStormOnPostgreSQL is the storm on pgwork and pgstore,
// where the losers' appends fail in the database.
func TestSameFindingStormOnPostgreSQL(t *testing.T) {
	t.Parallel()
	sameFindingStorm(t, newPGHarness(t, []step{async}), 10, 8)
}

// TestOneWebhookOneAnswer: a storm of signed callbacks for a parked
// review, with the same finding and with others (another state, the same
// state with other reasons), under different webhook-ids, each webhook
// delivered twice at once and once more after, gets one answer per
// webhook-id, however the deliveries interleave: applied for every
// webhook whose finding is the one recorded (the one that decided the
// review and those equal to it), refused for the others.
func TestOneWebhookOneAnswer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	ctx := context.Background()
	type finding struct {
		state   domain.Decision
		reasons []string
	}
	findings := []finding{
		{domain.DecisionAccepted, []string{"ok"}},
		{domain.DecisionAccepted, []string{"ok"}},
		{domain.DecisionRejected, []string{"ok"}},
		{domain.DecisionAccepted, []string{"ok", "more"}},
	}
	for r := range 60 {
		id := fmt.Sprintf("rev-storm-%d", r)
		h.submit(t, id, "c")
		h.workOnce(t, id)
		const webhooks, copies = 8, 2
		deliver := make([]func() error, webhooks)
		for w := range deliver {
			f := findings[w%len(findings)]
			hdr, body := h.signedFinding(id, 1, string(f.state), f.reasons, fmt.Sprintf("%s-msg-%d", id, w))
			deliver[w] = func() error { return h.HandleCallback(ctx, id, hdr, body) }
		}
		var all []func() error
		for w := range webhooks {
			for range copies {
				all = append(all, deliver[w])
			}
		}
		at := storm(h, id, all)
		answers := make([][]string, webhooks)
		for i, a := range at {
			answers[i/copies] = append(answers[i/copies], a)
		}
		events := historyEvents(t, h.ledger, id)
		if len(events) != 3 {
			t.Fatalf("%s: %d events, want Submitted, AttemptStarted and one FindingReceived", id, len(events))
		}
		recorded := events[2].(domain.FindingReceived).Finding()
		conflicts := 0
		for w := range webhooks {
			answers[w] = append(answers[w], callbackAnswer(deliver[w]()))
			for _, a := range answers[w][1:] {
				if a != answers[w][0] {
					t.Fatalf("%s: webhook %d answered %v: one webhook-id, two answers", id, w, answers[w])
				}
			}
			f := findings[w%len(findings)]
			want := "conflict"
			if recorded.Equal(domain.Finding{ReviewID: id, Attempt: 1, State: f.state, Reasons: f.reasons}) {
				want = "applied"
			}
			if answers[w][0] != want {
				t.Fatalf("%s: webhook %d (%v) answered %v, want %s: recorded %+v", id, w, f, answers[w], want, recorded)
			}
			if want == "conflict" {
				conflicts++
			}
		}
		// Each webhook refused is recorded as a conflicting completion at
		// least once (its copies at once share one answer; the one after
		// is refused again), and nothing else is.
		if got := h.conflicts(t, id); len(got) < conflicts || len(got) > conflicts*(copies+1) {
			t.Fatalf("%s: %d webhooks refused, conflicts recorded %v", id, conflicts, got)
		}
	}
}

// pauseFinding is a span processor that holds the first callback's
// finding span, started between loading the review and committing, until
// release is closed; started is closed once it holds it.
type pauseFinding struct {
	sdktrace.SpanProcessor
	held             atomic.Bool
	started, release chan struct{}
}

func (p *pauseFinding) OnStart(ctx context.Context, s sdktrace.ReadWriteSpan) {
	if s.Name() == SpanFinding && p.held.CompareAndSwap(false, true) {
		close(p.started)
		<-p.release
	}
}

// A callback that loaded the review before another webhook recorded an
// equal finding fails its expected-revision check, and is answered
// applied, not refused; one whose finding differs is refused as a
// conflicting completion (wrong_expected_version), as before.
func TestSameFindingLosesTheAppend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		reasons []string
		want    string
	}{
		{"equal", []string{"r"}, "applied"},
		{"other reasons", []string{"other"}, "conflict"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := &pauseFinding{SpanProcessor: sdktrace.NewSimpleSpanProcessor(nopExporter{}), started: make(chan struct{}), release: make(chan struct{})}
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(p))
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			h := newHarness(t, []step{async}, func(c *Config) { c.Tracer = tp })
			ctx := context.Background()
			h.submit(t, "rev-lose", "c")
			h.workOnce(t, "rev-lose")
			slow := make(chan error, 1)
			go func() {
				hdr, body := h.signedFinding("rev-lose", 1, "accepted", tc.reasons, "w-slow")
				slow <- h.HandleCallback(ctx, "rev-lose", hdr, body)
			}()
			<-p.started // w-slow loaded the pending review and waits
			hdr, body := h.signedCallback("rev-lose", 1, "accepted", "w-fast")
			if err := h.HandleCallback(ctx, "rev-lose", hdr, body); err != nil {
				t.Fatalf("w-fast = %v", err)
			}
			close(p.release)
			if got := callbackAnswer(<-slow); got != tc.want {
				t.Fatalf("w-slow answered %s, want %s", got, tc.want)
			}
			var want []string
			if tc.want == "conflict" {
				want = []string{"callback:wrong_expected_version:1"}
			}
			if got := h.conflicts(t, "rev-lose"); !slices.Equal(got, want) {
				t.Errorf("conflicts %v, want %v", got, want)
			}
			if got := len(h.events(t, "rev-lose")); got != 3 {
				t.Errorf("%d events, want one finding recorded", got)
			}
		})
	}
}

// nopExporter drops the spans.
type nopExporter struct{}

func (nopExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExporter) Shutdown(context.Context) error                             { return nil }

// seeHooked is a store that calls before ahead of each SeeDelivery and
// after once it answered, with the call's number, from 1.
type seeHooked struct {
	work.Store
	n      atomic.Int32
	before func(n int)
	after  func(n int, first bool, outcome string)
}

func (s *seeHooked) SeeDelivery(ctx context.Context, webhookID, reviewID string, now time.Time) (bool, string, error) {
	n := int(s.n.Add(1))
	if s.before != nil {
		s.before(n)
	}
	first, outcome, err := s.Store.SeeDelivery(ctx, webhookID, reviewID, now)
	if s.after != nil {
		s.after(n, first, outcome)
	}
	return first, outcome, err
}

// otherProcess is a second engine on h's store, ledger and clock.
func otherProcess(t *testing.T, h *harness) *Engine {
	t.Helper()
	other, err := New(inProcess(Config{Policy: testPolicy(), Store: h.store, Ledger: h.ledger, Provider: h.prov, Signer: h.signer,
		Clock: h.clock, Logger: slog.New(slog.DiscardHandler), Owner: "other"}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.closePub() })
	return other
}

// A copy of a delivery landing on another process while the first copy
// is being handled, its outcome not yet stored and its attempt still in
// flight, waits for the first copy's outcome and gets its answer, as do
// copies later on either process: applied when the first copy applied
// the finding, refused when it was refused (here: it came after its
// attempt's timeout, the attempt not closed yet). Before, such a copy
// was refused as a duplicate at once, and a later one answered 200.
func TestOneWebhookOneAnswerAcrossProcesses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		late bool
		want string
	}{
		{"applied", false, "applied"},
		{"refused", true, "conflict"},
	} {
		for _, store := range []struct {
			name string
			new  func(*testing.T, []step, ...func(*Config)) *harness
		}{{"memwork", newHarness}, {"pgwork", newPGHarness}} {
			t.Run(tc.name+"/"+store.name, func(t *testing.T) {
				t.Parallel()
				oneWebhookOneAnswerAcrossProcesses(t, store.new(t, []step{async}), tc.late, tc.want)
			})
		}
	}
}

func oneWebhookOneAnswerAcrossProcesses(t *testing.T, h *harness, late bool, want string) {
	t.Helper()
	other := otherProcess(t, h)
	ctx := context.Background()
	h.submit(t, "rev-two", "c")
	h.workOnce(t, "rev-two")
	if late {
		h.clock.Advance(3 * time.Second) // past attempt 1's 2 s
	}
	firstHeld, firstGo, firstDone, copyWaits := make(chan struct{}), make(chan struct{}), make(chan struct{}), make(chan struct{})
	// The first copy is held once it has seen the delivery first.
	h.store = &seeHooked{Store: h.store, after: func(n int, first bool, _ string) {
		if n == 1 && first {
			close(firstHeld)
			<-firstGo
		}
	}}
	// The copy found no outcome and the attempt in flight; its second
	// look waits for the first copy to be done.
	other.store = &seeHooked{Store: other.store, before: func(n int) {
		if n == 2 {
			close(copyWaits)
			<-firstDone
		}
	}}
	hdr, body := h.signedCallback("rev-two", 1, "accepted", "w-two")
	firstAnswer, copyAnswer := make(chan string, 1), make(chan string, 1)
	go func() {
		firstAnswer <- callbackAnswer(h.HandleCallback(ctx, "rev-two", hdr, body))
		close(firstDone)
	}()
	release := sync.OnceFunc(func() { close(firstGo) })
	t.Cleanup(release)
	<-firstHeld
	go func() { copyAnswer <- callbackAnswer(other.HandleCallback(ctx, "rev-two", hdr, body)) }()
	select {
	case <-copyWaits:
	case a := <-copyAnswer:
		t.Fatalf("the copy answered %s while the first copy was still being handled", a)
	}
	release()
	answers := []string{<-firstAnswer, <-copyAnswer}
	for _, e := range []*Engine{h.Engine, other, h.Engine, other} {
		answers = append(answers, callbackAnswer(e.HandleCallback(ctx, "rev-two", hdr, body)))
	}
	for i, a := range answers {
		if a != want {
			t.Fatalf("answers %v (the first copy, the waiting copy, then later ones): #%d is not %s", answers, i, want)
		}
	}
	events := []string{"Submitted", "AttemptStarted", "FindingReceived:accepted:callback"}
	if late {
		events = events[:2]
	}
	if got := h.types(t, "rev-two"); !slices.Equal(got, events) {
		t.Errorf("events %v, want %v", got, events)
	}
}

// A copy waiting on another process's first copy that comes to no
// outcome and lets the delivery go (a store fault) is handled afresh.
func TestACopyHandledAfreshWhenTheFirstLetsItGo(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	other := otherProcess(t, h)
	ctx := context.Background()
	h.submit(t, "rev-go", "c")
	h.workOnce(t, "rev-go")
	// The first copy, on a process not drawn here, has seen the delivery.
	if first, _, err := h.store.SeeDelivery(ctx, "w-go", "rev-go", h.clock.Now()); err != nil || !first {
		t.Fatalf("SeeDelivery = %v, %v", first, err)
	}
	base := other.store
	other.store = &seeHooked{Store: base, before: func(n int) {
		if n == 2 { // the copy's second look: the first copy failed meanwhile
			if err := base.ForgetDelivery(ctx, "w-go", "rev-go"); err != nil {
				t.Error(err)
			}
		}
	}}
	hdr, body := h.signedCallback("rev-go", 1, "rejected", "w-go")
	if err := other.HandleCallback(ctx, "rev-go", hdr, body); err != nil {
		t.Fatalf("copy = %v, want applied", err)
	}
	if err := h.HandleCallback(ctx, "rev-go", hdr, body); err != nil {
		t.Fatalf("later copy = %v, want applied", err)
	}
	want := []string{"Submitted", "AttemptStarted", "FindingReceived:rejected:callback"}
	if got := h.types(t, "rev-go"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}

// A copy whose first copy stores no outcome while its attempt stays in
// flight (the first copy held on another process, or its outcome lost)
// is not given a final answer the first copy may contradict: after
// deliveryWait it is answered ErrDeliveryInProgress, to be sent again, and
// records no conflict. Once the attempt is closed, the ledger answers the
// copy as the first copy was answered.
func TestACopyWithoutOutcomeIsSentAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{async})
	ctx := context.Background()
	h.submit(t, "rev-lost", "c")
	h.workOnce(t, "rev-lost")
	h.clock.Advance(3 * time.Second) // past attempt 1's 2 s; not closed yet
	h.store = failingOutcomes{h.store}
	hdr, body := h.signedCallback("rev-lost", 1, "accepted", "w-lost")
	if err := h.HandleCallback(ctx, "rev-lost", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("first copy = %v, want ErrConflictingCompletion", err)
	}
	before := h.clock.Now()
	if err := h.HandleCallback(ctx, "rev-lost", hdr, body); !errors.Is(err, ErrDeliveryInProgress) {
		t.Fatalf("copy without an outcome = %v, want ErrDeliveryInProgress", err)
	}
	if waited := h.clock.Now().Sub(before); waited != deliveryWait {
		t.Errorf("the copy waited %s, want %s", waited, deliveryWait)
	}
	if got := h.conflicts(t, "rev-lost"); !slices.Equal(got, []string{"callback:attempt_not_in_flight:1"}) {
		t.Errorf("conflicts %v, want the first copy's alone", got)
	}
	h.workOnce(t, "rev-lost") // closes attempt 1, starts attempt 2
	if got := h.types(t, "rev-lost"); !slices.Contains(got, "AttemptTimedOut:deadline_exceeded") {
		t.Fatalf("events %v: attempt 1 not closed", got)
	}
	if err := h.HandleCallback(ctx, "rev-lost", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("copy once the attempt closed = %v, want ErrConflictingCompletion", err)
	}
}
