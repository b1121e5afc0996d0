package engine

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// Upstream is a named provider of Config.Providers: a provider a class's
// route or shadows name beside the default one (Config.Provider).
type Upstream struct {
	Provider provider.Provider
	// Signer verifies the provider's callbacks; nil: Config.Signer's secret.
	Signer *provider.Signer
	// Timeout caps each call to it, within the attempt's timeout; zero:
	// the attempt's timeout alone.
	Timeout time.Duration
	// RetryBudget, RetryBudgetWindow and RetryBudgetMinRetries are its
	// retry budget, as Config's; zero takes Config's.
	RetryBudget           float64
	RetryBudgetWindow     time.Duration
	RetryBudgetMinRetries int
	// Circuit is its breaker; zero values take the documented defaults.
	Circuit Circuit
	// Concurrency bounds its calls as a shadow: a shadow call beyond it is
	// skipped. Zero: Config.Calls.
	Concurrency int
}

// Circuit configures a provider's circuit breaker: it opens when, over the
// last Window, at least MinCalls calls were made and FailureRatio of them
// failed in a way that counts against the provider; after OpenFor it lets
// Probes calls through (half open), and closes when they succeed.
type Circuit struct {
	FailureRatio float64       // default 0.5
	Window       time.Duration // default 10s
	MinCalls     int           // default 20
	OpenFor      time.Duration // default 5s
	Probes       int           // default 3
}

func (c *Circuit) setDefaults() {
	if c.FailureRatio == 0 {
		c.FailureRatio = 0.5
	}
	if c.Window == 0 {
		c.Window = 10 * time.Second
	}
	if c.MinCalls == 0 {
		c.MinCalls = 20
	}
	if c.OpenFor == 0 {
		c.OpenFor = 5 * time.Second
	}
	if c.Probes == 0 {
		c.Probes = 3
	}
}

func (c Circuit) validate(name string) error {
	switch {
	case c.FailureRatio <= 0 || c.FailureRatio > 1:
		return fmt.Errorf("provider %q: circuit.failure_ratio must be above 0 and at most 1, got %v: %w", name, c.FailureRatio, ErrInvalidConfig)
	case c.Window < 10*time.Millisecond || c.OpenFor <= 0:
		return fmt.Errorf("provider %q: circuit.window (at least 10ms) and circuit.open_for must be positive: %w", name, ErrInvalidConfig)
	case c.MinCalls < 1 || c.Probes < 1:
		return fmt.Errorf("provider %q: circuit.min_calls and circuit.probes must be at least 1: %w", name, ErrInvalidConfig)
	}
	return nil
}

// upstream is a provider as the engine works it: its retry budget, its
// breaker (none for the default provider, which keeps the behaviour of a
// single-provider deployment) and its shadow call slots.
type upstream struct {
	name    string
	label   string // its metrics' provider label
	cfg     Upstream
	budget  *retryBudget
	breaker *gobreaker.TwoStepCircuitBreaker[struct{}]
	shadows chan struct{}
}

// open reports whether the provider's circuit is open now.
func (u *upstream) open() bool {
	return u.breaker != nil && u.breaker.State() == gobreaker.StateOpen
}

// allow asks the breaker for a call; done records how the call went, and
// ok is false when the breaker refuses (open, or its probes taken).
func (u *upstream) allow() (done func(err error), ok bool) {
	if u.breaker == nil {
		return func(error) {}, true
	}
	done, err := u.breaker.Allow()
	if err != nil {
		return nil, false
	}
	return done, true
}

// errProviderFailed is what a call that counts against its provider tells
// the breaker; errNotCounted, a call ended by our own side.
var (
	errProviderFailed = errors.New("provider failed")
	errNotCounted     = errors.New("not the provider's outcome")
)

// breakerOutcome is what an attempt's answer tells the provider's breaker:
// nil for an answer (a finding or an acceptance), errProviderFailed for a
// failure that counts against the provider, errNotCounted for a recovery.
func breakerOutcome(a *answer) error {
	switch {
	case a.Finding != nil || a.async:
		return nil
	case a.Failure.Classification.Recovery():
		return errNotCounted
	}
	return errProviderFailed
}

// newUpstreams builds the engine's providers: the default one from cfg's
// single-provider settings, and each of cfg.Providers.
func newUpstreams(cfg Config) (map[string]*upstream, error) {
	ups := map[string]*upstream{domain.DefaultProvider: {
		name: domain.DefaultProvider, label: cfg.ProviderName,
		cfg:     Upstream{Provider: cfg.Provider, Signer: cfg.Signer},
		budget:  newRetryBudget(cfg.RetryBudget, cfg.RetryBudgetWindow, cfg.RetryBudgetMinRetries),
		shadows: make(chan struct{}, cfg.Calls),
	}}
	for name, u := range cfg.Providers {
		switch {
		case name == domain.DefaultProvider:
			return nil, fmt.Errorf("provider %q: the name is the single-provider settings' (REVIEWLEDGER_PROVIDER): %w", name, ErrInvalidConfig)
		case !domain.ValidProviderName(name):
			return nil, fmt.Errorf("provider %q: not a provider name: %w", name, ErrInvalidConfig)
		case u.Provider == nil:
			return nil, fmt.Errorf("provider %q: no provider: %w", name, ErrInvalidConfig)
		case u.RetryBudget < 0 || u.RetryBudget > 1:
			return nil, fmt.Errorf("provider %q: retry_budget.ratio must be between 0 and 1, got %v: %w", name, u.RetryBudget, ErrInvalidConfig)
		case u.Timeout < 0 || u.Concurrency < 0 || u.RetryBudgetWindow < 0 || u.RetryBudgetMinRetries < 0:
			return nil, fmt.Errorf("provider %q: timeout, concurrency and the retry budget must not be negative: %w", name, ErrInvalidConfig)
		}
		u.Circuit.setDefaults()
		if err := u.Circuit.validate(name); err != nil {
			return nil, err
		}
		if u.Signer == nil {
			u.Signer = cfg.Signer
		}
		ratio, window, minRetries := cmp0(u.RetryBudget, cfg.RetryBudget), cmp0(u.RetryBudgetWindow, cfg.RetryBudgetWindow), cmp0(u.RetryBudgetMinRetries, cfg.RetryBudgetMinRetries)
		ups[name] = &upstream{
			name: name, label: name, cfg: u,
			budget:  newRetryBudget(ratio, window, minRetries),
			breaker: newBreaker(name, u.Circuit),
			shadows: make(chan struct{}, cmp0(u.Concurrency, cfg.Calls)),
		}
	}
	for _, class := range cfg.Policy.Names() {
		c := cfg.Policy.Classes[class]
		for _, name := range append(slices.Clone(c.Route()), c.Shadows...) {
			if ups[name] == nil {
				return nil, fmt.Errorf("class %q: no provider named %q is configured: %w", class, name, ErrInvalidConfig)
			}
		}
	}
	return ups, nil
}

// cmp0 returns v, or def when v is zero.
func cmp0[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

func newBreaker(name string, c Circuit) *gobreaker.TwoStepCircuitBreaker[struct{}] {
	return gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         name,
		MaxRequests:  uint32(c.Probes),
		Interval:     c.Window,
		BucketPeriod: c.Window / 10,
		Timeout:      c.OpenFor,
		ReadyToTrip: func(n gobreaker.Counts) bool {
			calls := n.TotalSuccesses + n.TotalFailures
			return calls >= uint32(c.MinCalls) && float64(n.TotalFailures) >= c.FailureRatio*float64(calls)
		},
		IsExcluded: func(err error) bool { return errors.Is(err, errNotCounted) },
	})
}

// facts returns what the decider needs to know of the providers of r's
// class: its route and shadows in force and the providers whose circuit
// is open.
func (e *Engine) facts(r *domain.Review, f domain.Facts) domain.Facts {
	c := e.cfg.Policy.Classes[r.Class()]
	f.Route, f.Shadows = c.Route(), c.Shadows
	for _, name := range f.Route {
		if e.upstreams[name].open() {
			f.Open = append(f.Open, name)
		}
	}
	return f
}
