package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

// twoProviders routes class "c" to primary, then backup; h.prov (the
// default provider) decides nothing.
func twoProviders(primary, backup provider.Provider, circuit Circuit) func(*Config) {
	return func(c *Config) {
		c.Providers = map[string]Upstream{
			"primary": {Provider: primary, Circuit: circuit},
			"backup":  {Provider: backup},
		}
		p := c.Policy.Classes["c"]
		p.Providers = []string{"primary", "backup"}
		c.Policy.Classes["c"] = p
	}
}

// providerOf returns the provider each AttemptStarted of id went to.
func (h *harness) providersOf(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, e := range h.events(t, id) {
		if a, ok := e.(domain.AttemptStarted); ok {
			out = append(out, a.ProviderName())
		}
	}
	return out
}

func TestPrimaryDownTheFallbackDecidesWithinTheBudget(t *testing.T) {
	t.Parallel()
	primary := &scripted{steps: []step{failure(domain.ClassProviderUnavailable, 0)}}
	backup := &switchable{}
	// A breaker that never opens here: each review pays its own failover.
	h := newHarness(t, nil, twoProviders(primary, backup, Circuit{MinCalls: 1000}))
	primary.clock = h.clock
	for i := range 20 {
		id := fmt.Sprintf("fo-%d", i)
		start := h.clock.Now()
		rv := h.run(t, id, "c")
		if rv.State() != domain.StateAccepted {
			t.Fatalf("%s is %s, want accepted by the fallback: %v", id, rv.State(), h.types(t, id))
		}
		if got := h.clock.Now().Sub(start); got > rv.Policy().Budget {
			t.Fatalf("%s decided after %s, past its budget %s", id, got, rv.Policy().Budget)
		}
		if got := h.providersOf(t, id); fmt.Sprint(got) != "[primary backup]" {
			t.Fatalf("%s attempts went to %v, want [primary backup]", id, got)
		}
	}
	if n := len(h.prov.Requests()); n != 0 {
		t.Fatalf("the default provider, routed to by no class c, was called %d times", n)
	}
}

// switchable fails while down is set and answers otherwise.
type switchable struct {
	down  atomic.Bool
	mu    sync.Mutex
	calls int
}

func (p *switchable) Call(_ context.Context, req provider.Request) provider.Result {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if p.down.Load() {
		return provider.Failure(domain.ClassProviderUnavailable, "http 503")
	}
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted, Reasons: []string{"ok"}}}
}

func (p *switchable) Calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

func TestTheCircuitOpensOnADeadPrimaryAndClosesWhenItRecovers(t *testing.T) {
	t.Parallel()
	primary := &switchable{}
	primary.down.Store(true)
	backup := &switchable{}
	circuit := Circuit{FailureRatio: 0.5, Window: time.Minute, MinCalls: 5, OpenFor: time.Second, Probes: 1}
	h := newHarness(t, nil, twoProviders(primary, backup, circuit))
	breaker := h.upstreams["primary"].breaker
	for i := range 5 {
		h.run(t, fmt.Sprintf("open-%d", i), "c")
	}
	if breaker.State() != gobreaker.StateOpen {
		t.Fatalf("after 5 failed calls in 5 the primary's circuit is %s, want open", breaker.State())
	}
	calls := primary.Calls()
	for i := range 10 {
		id := fmt.Sprintf("while-open-%d", i)
		if rv := h.run(t, id, "c"); rv.State() != domain.StateAccepted {
			t.Fatalf("%s is %s", id, rv.State())
		}
		if got := h.providersOf(t, id); fmt.Sprint(got) != "[backup]" && breaker.State() == gobreaker.StateOpen {
			t.Fatalf("%s attempts went to %v while the primary's circuit is open, want [backup]", id, got)
		}
	}
	if breaker.State() == gobreaker.StateOpen && primary.Calls() != calls {
		t.Fatalf("the open circuit let %d calls through to the primary", primary.Calls()-calls)
	}
	primary.down.Store(false)
	clocktest.Eventually(t, "the circuit half open", func() bool { return breaker.State() == gobreaker.StateHalfOpen })
	if got := h.providersOf(t, h.run(t, "probe", "c").ID()); fmt.Sprint(got) != "[primary]" {
		t.Fatalf("the probe went to %v, want [primary]", got)
	}
	if breaker.State() != gobreaker.StateClosed {
		t.Fatalf("after a probe that succeeded the circuit is %s, want closed", breaker.State())
	}
	if got := h.providersOf(t, h.run(t, "after", "c").ID()); fmt.Sprint(got) != "[primary]" {
		t.Fatalf("after the circuit closed the review went to %v, want [primary]", got)
	}
}

func TestAClassNamingAnUnconfiguredProviderIsRefused(t *testing.T) {
	t.Parallel()
	cfg := Config{Policy: testPolicy()}
	p := cfg.Policy.Classes["c"]
	p.Providers = []string{"nowhere"}
	cfg.Policy.Classes["c"] = p
	cfg.setDefaults()
	_, err := newUpstreams(cfg)
	if err == nil || err.Error() != `class "c": no provider named "nowhere" is configured: `+ErrInvalidConfig.Error() {
		t.Fatalf("newUpstreams = %v, want the class and provider named", err)
	}
}

func TestALedgerThatDoesNotCommitThroughTheStoreIsRefused(t *testing.T) {
	t.Parallel()
	events := memstore.New()
	store := memwork.New(events)
	cfg := inProcess(Config{Policy: testPolicy(), Store: store, Ledger: ledger.New(events), Provider: acceptsAsync{}})
	cfg.setDefaults()
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Ledger must commit through Store") {
		t.Fatalf("Validate = %v, want the ledger refused", err)
	}
	cfg.Ledger = store.Ledger(ledger.GroupCommit{})
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate of the store's own ledger = %v", err)
	}
}
