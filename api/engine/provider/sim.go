package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// SimConfig shapes the simulated provider. Rates are probabilities in
// [0, 1], drawn in this order per attempt: timeout, error, invalid answer,
// asynchronous answer (of which LateCallbackRate arrive after the attempt's
// timeout); what remains is a synchronous finding.
type SimConfig struct {
	// Seed makes the simulation repeatable.
	Seed uint64
	// MedianLatency and P99Latency shape a log-normal service time.
	// Defaults 200ms and 2s.
	MedianLatency time.Duration
	P99Latency    time.Duration
	// TimeoutRate: the attempt hangs until its timeout.
	TimeoutRate float64
	// ErrorRate: the attempt fails as a 503 would.
	ErrorRate float64
	// InvalidRate: the answer is not a complete finding.
	InvalidRate float64
	// AsyncRate: the attempt is accepted (202) and the finding comes by
	// callback.
	AsyncRate float64
	// LateCallbackRate: share of asynchronous findings delivered after the
	// attempt's timeout (they must be refused as conflicting completions).
	LateCallbackRate float64
	// RejectRate: share of findings that reject (zero: all accept).
	RejectRate float64

	// Deliver hands a signed callback to the service, as the HTTP route
	// would. Required when AsyncRate > 0.
	Deliver func(ctx context.Context, reviewID string, h http.Header, body []byte) error
	// Signer signs callbacks. Required when AsyncRate > 0.
	Signer *Signer
	// Sleep waits d or until ctx is done; a timer when nil. Tests inject a
	// fake clock's.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now stamps callbacks; time.Now when nil.
	Now func() time.Time
}

// ErrInvalidSimConfig names the simulator setting at fault.
var ErrInvalidSimConfig = errors.New("invalid simulator setting")

func (c *SimConfig) setDefaults() {
	if c.MedianLatency <= 0 {
		c.MedianLatency = 200 * time.Millisecond
	}
	if c.P99Latency <= 0 {
		c.P99Latency = max(2*time.Second, c.MedianLatency)
	}
	if c.Sleep == nil {
		c.Sleep = clock.Sleep
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the first setting at fault.
func (c SimConfig) Validate() error {
	rates := []struct {
		name string
		v    float64
	}{
		{"REVIEWLEDGER_SIM_TIMEOUT_RATE", c.TimeoutRate},
		{"REVIEWLEDGER_SIM_ERROR_RATE", c.ErrorRate},
		{"REVIEWLEDGER_SIM_INVALID_RATE", c.InvalidRate},
		{"REVIEWLEDGER_SIM_ASYNC_RATE", c.AsyncRate},
		{"REVIEWLEDGER_SIM_LATE_CALLBACK_RATE", c.LateCallbackRate},
		{"REVIEWLEDGER_SIM_REJECT_RATE", c.RejectRate},
	}
	for _, r := range rates {
		if r.v < 0 || r.v > 1 || math.IsNaN(r.v) {
			return fmt.Errorf("%s must be between 0 and 1, got %v: %w", r.name, r.v, ErrInvalidSimConfig)
		}
	}
	if sum := c.TimeoutRate + c.ErrorRate + c.InvalidRate + c.AsyncRate; sum > 1 {
		return fmt.Errorf("REVIEWLEDGER_SIM_TIMEOUT_RATE + _ERROR_RATE + _INVALID_RATE + _ASYNC_RATE must not exceed 1, got %v: %w", sum, ErrInvalidSimConfig)
	}
	if c.MedianLatency < 0 || c.P99Latency < 0 {
		return fmt.Errorf("REVIEWLEDGER_SIM_MEDIAN_LATENCY and _P99_LATENCY must not be negative: %w", ErrInvalidSimConfig)
	}
	if c.P99Latency > 0 && c.MedianLatency > 0 && c.P99Latency < c.MedianLatency {
		return fmt.Errorf("REVIEWLEDGER_SIM_P99_LATENCY %s is below REVIEWLEDGER_SIM_MEDIAN_LATENCY %s: %w", c.P99Latency, c.MedianLatency, ErrInvalidSimConfig)
	}
	if c.AsyncRate > 0 && (c.Deliver == nil || c.Signer == nil) {
		return fmt.Errorf("REVIEWLEDGER_SIM_ASYNC_RATE needs a callback target and secret: %w", ErrInvalidSimConfig)
	}
	return nil
}

// Sim is a seeded simulated provider.
type Sim struct {
	cfg   SimConfig
	mu    sync.Mutex
	rng   *rand.Rand
	sigma float64

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	seq    uint64
}

var _ Provider = (*Sim)(nil)

// NewSim returns a simulator. Close stops its pending callbacks.
func NewSim(cfg SimConfig) (*Sim, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Sim{
		cfg:   cfg,
		rng:   rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		sigma: math.Log(float64(cfg.P99Latency)/float64(cfg.MedianLatency)) / 2.3263,
		ctx:   ctx, cancel: cancel,
	}, nil
}

// Close cancels callbacks not yet delivered and waits for their goroutines.
func (s *Sim) Close() error {
	s.cancel()
	s.wg.Wait()
	return nil
}

type simDraw struct {
	roll, roll2, roll3 float64
	latency            time.Duration
}

func (s *Sim) draw() simDraw {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := simDraw{roll: s.rng.Float64(), roll2: s.rng.Float64(), roll3: s.rng.Float64()}
	d.latency = time.Duration(float64(s.cfg.MedianLatency) * math.Exp(s.sigma*s.rng.NormFloat64()))
	s.seq++
	return d
}

// Call simulates one attempt.
func (s *Sim) Call(ctx context.Context, req Request) Result {
	d := s.draw()
	c := s.cfg
	finding := domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted, Reasons: []string{}}
	if d.roll2 < c.RejectRate {
		finding.State, finding.Reasons = domain.DecisionRejected, []string{"sim:policy_violation"}
	}
	switch p := d.roll; {
	case p < c.TimeoutRate:
		<-ctx.Done()
		return Failure(domain.ClassDeadlineExceeded, "sim hang")
	case p < c.TimeoutRate+c.ErrorRate:
		if err := c.Sleep(ctx, d.latency/4); err != nil {
			return Failure(domain.ClassDeadlineExceeded, "sim cancelled")
		}
		return Failure(domain.ClassProviderUnavailable, "sim 503")
	case p < c.TimeoutRate+c.ErrorRate+c.InvalidRate:
		if err := c.Sleep(ctx, d.latency); err != nil {
			return Failure(domain.ClassDeadlineExceeded, "sim cancelled")
		}
		return Result{Outcome: OutcomeFinding, Detail: "sim invalid", Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: "maybe"}}
	case p < c.TimeoutRate+c.ErrorRate+c.InvalidRate+c.AsyncRate:
		delay := min(d.latency, req.Timeout/2)
		if d.roll3 < c.LateCallbackRate {
			delay = req.Timeout + d.latency
		}
		s.callback(finding, delay)
		return Result{Outcome: OutcomeAccepted, Detail: "sim 202"}
	}
	if err := c.Sleep(ctx, d.latency); err != nil {
		return Failure(domain.ClassDeadlineExceeded, "sim cancelled")
	}
	return Result{Outcome: OutcomeFinding, Detail: "sim 200", Finding: finding}
}

func (s *Sim) callback(f domain.Finding, delay time.Duration) {
	s.mu.Lock()
	id := "sim_" + strconv.FormatUint(s.cfg.Seed, 16) + "_" + strconv.FormatUint(s.seq, 10)
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := s.cfg.Sleep(s.ctx, delay); err != nil {
			return
		}
		body, _ := json.Marshal(CallbackBody{ReviewID: f.ReviewID, Attempt: f.Attempt, State: string(f.State), Reasons: f.Reasons})
		h := http.Header{}
		s.cfg.Signer.SignHeader(h, id, s.cfg.Now(), body)
		// The outcome (applied, or refused as a conflicting completion) is
		// the service's to record.
		_ = s.cfg.Deliver(s.ctx, f.ReviewID, h, body)
	}()
}
