package engine

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/engine/hint"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

const (
	crashChildEnv = "REVIEWLEDGER_ENGINE_CRASH_CHILD" // the database URL
	crashReviews  = 6
)

func crashPolicy() domain.Policy {
	return domain.Policy{Classes: map[string]domain.ClassPolicy{"crash": {
		Budget: 20 * time.Second, AttemptTimeout: time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}}}
}

// stuck never answers: the worker is killed while waiting on it.
type stuck struct{}

func (stuck) Call(ctx context.Context, _ provider.Request) provider.Result {
	<-ctx.Done()
	return provider.Failure(domain.ClassDeadlineExceeded, "stuck")
}

// pgEngine is an engine on the database at url: pgstore ledger, pgwork
// records, with a short lease so a dead owner's reviews come back soon;
// its hints stay in the process (the Go channel).
func pgEngine(ctx context.Context, url string, p provider.Provider, tweak ...func(*Config)) (*Engine, *ledger.Ledger, func(), error) {
	return pgEngineOn(ctx, url, p, hint.Config{}, tweak...)
}

// pgEngineOn is pgEngine with the hints of hc (its Pool the engine's, its
// Logger the engine's unless set).
func pgEngineOn(ctx context.Context, url string, p provider.Provider, hc hint.Config, tweak ...func(*Config)) (*Engine, *ledger.Ledger, func(), error) {
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return nil, nil, nil, err
	}
	store := pgstore.New(pool, pgstore.Config{})
	work := pgwork.New(pool, store)
	led := work.Ledger(ledger.GroupCommit{})
	cfg := Config{Policy: crashPolicy(), Store: work, Ledger: led, Provider: p,
		Lease: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	for _, f := range tweak {
		f(&cfg)
	}
	hc.Pool = pool
	if hc.Logger == nil {
		hc.Logger = cfg.Logger
	}
	if cfg.Hints, err = hint.Open(ctx, hc); err != nil {
		store.Close()
		pool.Close()
		return nil, nil, nil, err
	}
	e, err := New(cfg)
	if err != nil {
		_ = cfg.Hints.Close()
		store.Close()
		pool.Close()
		return nil, nil, nil, err
	}
	return e, led, func() { _ = e.closePub(); store.Close(); pool.Close() }, nil
}

// crashChild is the worker process the crash test kills: it works every
// pending review against a provider that never answers.
func crashChild() int {
	ctx := context.Background()
	e, _, _, err := pgEngine(ctx, os.Getenv(crashChildEnv), stuck{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("running")
	if err := e.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// Kill a worker process mid-attempt (SIGKILL: nothing is written on its
// way out); once its leases expire, a fresh engine takes the reviews: each
// ends exactly once, the lost attempt closed as worker_lost.
func TestCrashedWorkerIsResumed(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx := context.Background()
	submitter, led, closeSubmitter, err := pgEngine(ctx, url, stuck{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeSubmitter()
	for i := range crashReviews {
		if _, _, err := submitter.Submit(ctx, SubmitRequest{ReviewID: fmt.Sprintf("crash-%d", i), ContentClass: "crash", Content: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), crashChildEnv+"="+url)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	}()
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "running" {
		t.Fatalf("worker process said %q", line)
	}
	// Wait until every review has an attempt in flight, then kill.
	clocktest.Eventually(t, "every crashed review decided by the survivors", func() bool {
		for i := range crashReviews {
			rv, err := led.Load(ctx, fmt.Sprintf("crash-%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if n, _, _, _ := rv.InFlight(); n == 0 {
				return false
			}
		}
		return true
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	killed = true

	fresh, _, closeFresh, err := pgEngine(ctx, url, &instant{})
	if err != nil {
		t.Fatal(err)
	}
	defer closeFresh()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- fresh.Run(runCtx) }()
	waitNoWork(t, fresh, done)
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := []string{"Submitted", "AttemptStarted", "AttemptTimedOut:worker_lost", "AttemptStarted", "FindingReceived:accepted:response"}
	for i := range crashReviews {
		id := fmt.Sprintf("crash-%d", i)
		if got := eventTypes(t, led, id); !slices.Equal(got, want) {
			t.Errorf("%s: events %v, want %v", id, got, want)
		}
	}
}

// waitNoWork waits until no review has a work record left, failing if Run
// returns first.
func waitNoWork(t *testing.T, e *Engine, done <-chan error) {
	t.Helper()
	clocktest.EventuallyShows(t, "no review left with a work record", func() (bool, string) {
		left, err := e.store.Count(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return true, ""
		}
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		default:
		}
		return false, fmt.Sprintf("%d reviews still have work records", left)
	})
}
