package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// A waiter is told of an append through its ledger at once, and of an
// append by another process (another ledger on the same store) while
// Follow reads the global order; a waiter of another review is not.
func TestWatcher(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	here, elsewhere := ledger.New(store), ledger.New(store)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := here.Watcher()
	followed := make(chan error, 1)
	go func() { followed <- w.Follow(ctx, 10*time.Millisecond) }()
	clocktest.Eventually(t, "Follow following", w.Following)
	ch, stop := w.Watch("w-1")
	defer stop()
	other, stopOther := w.Watch("w-2")
	defer stopOther()
	if n := w.Waiting(); n != 2 {
		t.Fatalf("Waiting = %d", n)
	}
	snap, err := here.Create(ctx, submitted(t, "w-1"), ledger.Actor{Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := snap.StartAttempt(snap.SubmittedAt())
	if snap, err = here.Append(ctx, snap, ledger.Actor{Name: "test"}, st); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("told of changes that leave the review pending")
	default:
	}
	to, _ := snap.TimeOutAttempt(domain.AttemptFailure{Attempt: 1, Classification: domain.ClassTransportError}, snap.SubmittedAt())
	if snap, err = here.Append(ctx, snap, ledger.Actor{Name: "test"}, to); err != nil {
		t.Fatal(err)
	}
	esc, _ := snap.Escalate(domain.ReasonCancelled, "", snap.SubmittedAt())
	if _, err := here.Append(ctx, snap, ledger.Actor{Name: "test"}, esc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("an escalation through the ledger was not told")
	}
	if _, err := here.Create(ctx, submitted(t, "w-3"), ledger.Actor{Name: "test"}); err != nil {
		t.Fatal(err)
	}
	ch, stop2 := w.Watch("w-3")
	defer stop2()
	snap, err = elsewhere.Load(ctx, "w-3")
	if err != nil {
		t.Fatal(err)
	}
	esc, _ = snap.Escalate(domain.ReasonCancelled, "", snap.SubmittedAt())
	if _, err := elsewhere.Append(ctx, snap, ledger.Actor{Name: "other"}, esc); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("an escalation by another process was not told")
	}
	select {
	case <-other:
		t.Fatal("the waiter of another review was told")
	default:
	}
	stopOther()
	if n := w.Waiting(); n != 0 {
		t.Errorf("Waiting = %d after every waiter was told or stopped", n)
	}
	cancel()
	if err := <-followed; err != nil {
		t.Errorf("Follow = %v", err)
	}
}
