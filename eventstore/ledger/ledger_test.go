package ledger_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func submitted(t *testing.T, id string) domain.Submitted {
	t.Helper()
	p := domain.DefaultPolicy()
	cp, err := p.Class("caption_suggestion")
	if err != nil {
		t.Fatal(err)
	}
	s, err := domain.Submit(domain.SubmitCommand{ReviewID: id, ContentClass: "caption_suggestion", ContentType: "text/plain", PayloadDigest: "sha256:00", Policy: cp, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestCreateAppendLoad(t *testing.T) {
	ctx := context.Background()
	l := ledger.New(memstore.New())
	rv, err := l.Create(ctx, submitted(t, "r1"), ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Create(ctx, submitted(t, "r1"), ledger.Actor{Name: "platform"}); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("second create: got %v, want ErrWrongExpectedVersion", err)
	}
	start, err := rv.StartAttempt(t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	inFlight, err := l.Append(ctx, rv, ledger.Actor{Name: "runner"}, start)
	if err != nil {
		t.Fatal(err)
	}
	if rv.Version() != 0 || inFlight.Version() != 1 {
		t.Fatalf("versions: snapshot %d, appended %d; want 0 and 1", rv.Version(), inFlight.Version())
	}
	// The attempt times out; a late finding built on the in-flight snapshot
	// must fail its expected-revision check and change nothing.
	timedOut, err := inFlight.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassDeadlineExceeded}, t0.Add(11*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, inFlight, ledger.Actor{Name: "runner"}, timedOut); err != nil {
		t.Fatal(err)
	}
	late, err := inFlight.RecordFinding(domain.Finding{ReviewID: "r1", Attempt: 1, State: domain.DecisionAccepted}, domain.SourceCallback, t0.Add(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Append(ctx, inFlight, ledger.Actor{Name: "provider"}, late...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		t.Fatalf("late finding: got %v, want ErrWrongExpectedVersion", err)
	}
	got, err := l.Load(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if got.State() != domain.StatePending || got.Version() != 2 || got.Attempts() != 1 {
		t.Fatalf("loaded: state %s version %d attempts %d; want pending 2 1", got.State(), got.Version(), got.Attempts())
	}
	h, err := l.History(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Verify(); err != nil {
		t.Fatalf("intact history: %v", err)
	}
	if h.Events[1].Metadata.Actor != "runner" || h.Events[0].Metadata.Schema != domain.SchemaVersion {
		t.Fatalf("metadata not recorded: %+v", h.Events[1].Metadata)
	}
}

func TestLoadMissing(t *testing.T) {
	l := ledger.New(memstore.New())
	if _, err := l.Load(context.Background(), "nope"); !errors.Is(err, domain.ErrReviewNotFound) {
		t.Fatalf("got %v, want ErrReviewNotFound", err)
	}
	if _, err := l.Load(context.Background(), "bad id"); !errors.Is(err, domain.ErrInvalidReviewID) {
		t.Fatalf("got %v, want ErrInvalidReviewID", err)
	}
}

func TestVerifyDetectsTampering(t *testing.T) {
	ctx := context.Background()
	l := ledger.New(memstore.New())
	rv, err := l.Create(ctx, submitted(t, "r2"), ledger.Actor{Name: "platform"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		start, err := rv.StartAttempt(t0.Add(time.Duration(i+1) * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rv, err = l.Append(ctx, rv, ledger.Actor{Name: "runner"}, start); err != nil {
			t.Fatal(err)
		}
		out, err := rv.TimeOutAttempt(domain.AttemptFailure{Attempt: i + 1, Classification: domain.ClassTransportError}, t0.Add(time.Duration(i+2)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if rv, err = l.Append(ctx, rv, ledger.Actor{Name: "runner"}, out); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func() *ledger.History {
		h, err := l.History(ctx, "r2")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	cases := map[string]func(h *ledger.History){
		"altered body": func(h *ledger.History) {
			h.Events[2].Data = append([]byte(nil), h.Events[2].Data...)
			h.Events[2].Data[len(h.Events[2].Data)-2] ^= 1
		},
		"altered actor": func(h *ledger.History) { h.Events[1].Metadata.Actor = "someone-else" },
		"removed":       func(h *ledger.History) { h.Events = append(h.Events[:1], h.Events[2:]...) },
		"swapped": func(h *ledger.History) {
			h.Events[1], h.Events[3] = h.Events[3], h.Events[1]
			h.Events[1].Revision, h.Events[3].Revision = 1, 3
		},
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			h := fresh()
			tamper(h)
			var ce *ledger.ChainError
			if err := h.Verify(); !errors.As(err, &ce) || !errors.Is(err, ledger.ErrTampered) || ce.ReviewID != "r2" {
				t.Fatalf("got %v, want a ChainError for r2", err)
			}
		})
	}
}

// A review loaded or written before is brought up to date by reading from
// its last known event on: appends by another ledger are seen, and a
// history rewritten underneath (the kept event's hash changed) is read
// again from the start.
func TestLoadKeepsUpWithOtherWriters(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	here, elsewhere := ledger.New(store), ledger.New(store)
	ctx := context.Background()
	snap, err := here.Create(ctx, submitted(t, "k-1"), ledger.Actor{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := elsewhere.Load(ctx, "k-1")
	if err != nil {
		t.Fatal(err)
	}
	st, _ := other.StartAttempt(other.SubmittedAt())
	if _, err := elsewhere.Append(ctx, other, ledger.Actor{Name: "other"}, st); err != nil {
		t.Fatal(err)
	}
	got, err := here.Load(ctx, "k-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Version() != 1 || got.Attempts() != 1 {
		t.Fatalf("loaded version %d with %d attempts, want the other ledger's attempt", got.Version(), got.Attempts())
	}
	if _, err := here.Append(ctx, snap, ledger.Actor{Name: "test"}, st); err == nil {
		t.Fatal("an append at the stale version was written")
	}
	again, err := here.Load(ctx, "k-1")
	if err != nil || again.Version() != 1 {
		t.Fatalf("second load = %v, %v", again, err)
	}
	to, _ := again.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassTransportError}, again.SubmittedAt())
	if _, err := here.Append(ctx, again, ledger.Actor{Name: "test"}, to); err != nil {
		t.Fatal(err)
	}
	if got, err := elsewhere.Load(ctx, "k-1"); err != nil || got.Version() != 2 || got.LastFailure().Attempt != 1 {
		t.Fatalf("the other ledger loads %v, %v", got, err)
	}
}

// The traceparent a review was created with stays its trace: loaded
// fresh, from the cache after appends by this ledger, or brought up to
// date after another ledger's appends; later appends' traceparents are
// kept in their own metadata only.
func TestTraceParentOfAReview(t *testing.T) {
	ctx := context.Background()
	store := memstore.New()
	l, other := ledger.New(store), ledger.New(store)
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	rv, err := l.Create(ctx, submitted(t, "tp1"), ledger.Actor{Name: "platform", TraceParent: tp})
	if err != nil {
		t.Fatal(err)
	}
	if rv.TraceParent() != tp {
		t.Fatalf("created snapshot: %q", rv.TraceParent())
	}
	if _, err := l.Load(ctx, "tp1"); err != nil {
		t.Fatal(err)
	}
	start, err := rv.StartAttempt(t0.Add(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	const later = "00-4bf92f3577b34da6a3ce929d0e0e4736-1111111111111111-01"
	if _, err := other.Append(ctx, mustLoad(t, other, "tp1"), ledger.Actor{Name: "engine", TraceParent: later}, start); err != nil {
		t.Fatal(err)
	}
	for name, lg := range map[string]*ledger.Ledger{"brought up to date": l, "its own append": other, "fresh": ledger.New(store)} {
		got := mustLoad(t, lg, "tp1")
		if got.TraceParent() != tp || got.Version() != 1 {
			t.Errorf("%s: traceparent %q at version %d, want %q at 1", name, got.TraceParent(), got.Version(), tp)
		}
	}
	h, err := l.History(ctx, "tp1")
	if err != nil {
		t.Fatal(err)
	}
	if h.Events[0].Metadata.TraceParent != tp || h.Events[1].Metadata.TraceParent != later {
		t.Errorf("metadata traceparents %q, %q", h.Events[0].Metadata.TraceParent, h.Events[1].Metadata.TraceParent)
	}
	if err := h.Verify(); err != nil {
		t.Errorf("history with traceparents: %v", err)
	}
}

func mustLoad(t *testing.T, l *ledger.Ledger, id string) *ledger.Snapshot {
	t.Helper()
	s, err := l.Load(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
