package pglock_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// One of two contenders leads at a time; Holders names it by its
// application name; when it returns, the other takes over.
func TestLeadElectsOneAndHoldersNamesIt(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := pglock.Key("pglock.test")
	if pglock.Key("pglock.test") != key || pglock.Key("pglock.other") == key {
		t.Fatal("Key is not a function of the name")
	}
	if h, err := pglock.Holders(ctx, pool, key); err != nil || len(h) != 0 {
		t.Fatalf("before any lead: %v, %v", h, err)
	}

	leading := make(chan struct{})
	release := make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- pglock.Lead(ctx, pool, key, 20*time.Millisecond, func(context.Context) error {
			close(leading)
			<-release
			return nil
		})
	}()
	<-leading
	h, err := pglock.Holders(ctx, pool, key, pglock.Key("pglock.other"))
	if err != nil {
		t.Fatal(err)
	}
	got, ok := h[key]
	if len(h) != 1 || !ok || got.App != pglock.AppName() || !strings.HasSuffix(got.App, ":"+strconv.Itoa(os.Getpid())) || got.PID == 0 {
		t.Fatalf("holders %+v, want only %q", h, pglock.AppName())
	}

	second := make(chan error, 1)
	led := make(chan struct{})
	go func() {
		second <- pglock.Lead(ctx, pool, key, 20*time.Millisecond, func(context.Context) error {
			close(led)
			return nil
		})
	}()
	select {
	case <-led:
		t.Fatal("two lead at once")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatal(err)
	}
	select {
	case <-led:
	default:
		t.Fatal("the second never led")
	}

	// A contender still waiting returns when its context ends.
	// (Wait for the blocker itself to lead: a session just closed may
	// still show as the holder for a moment while its backend exits.)
	blocker, blocking := make(chan struct{}), make(chan struct{})
	go func() {
		_ = pglock.Lead(ctx, pool, key, 20*time.Millisecond, func(context.Context) error { close(blocking); <-blocker; return nil })
	}()
	defer close(blocker)
	<-blocking
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer wcancel()
	if err := pglock.Lead(wctx, pool, key, 20*time.Millisecond, func(context.Context) error { return nil }); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a waiting contender's Lead returned %v, want the context's error", err)
	}
}
