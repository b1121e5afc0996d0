package domain

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// CapacityInput describes a review load for capacity planning.
type CapacityInput struct {
	// Rate is the arrival rate of new reviews, per second.
	Rate float64
	// ServiceTime is how long an attempt that answers holds a worker.
	ServiceTime time.Duration
	// TimeoutRate is the fraction of attempts, in [0, 1), that produce no
	// usable finding; each one is retried while attempts remain.
	TimeoutRate float64
	// MaxAttempts counts the initial call and every retry.
	MaxAttempts int
	// AttemptTimeout is how long an attempt that times out holds a worker.
	AttemptTimeout time.Duration
}

// Validate names the first field at fault in a *FieldError.
func (in CapacityInput) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Err: ErrInvalidCapacityInput}
	}
	switch {
	case !(in.Rate > 0) || math.IsInf(in.Rate, 0):
		return bad("rate", "must be a positive number of reviews per second, got %v", in.Rate)
	case in.ServiceTime <= 0:
		return bad("service_time", "must be positive, got %s", in.ServiceTime)
	case !(in.TimeoutRate >= 0 && in.TimeoutRate < 1):
		return bad("timeout_rate", "must be in [0, 1), got %v", in.TimeoutRate)
	case in.MaxAttempts < 1:
		return bad("max_attempts", "must be at least 1, got %d", in.MaxAttempts)
	case in.AttemptTimeout <= 0:
		return bad("attempt_timeout", "must be positive, got %s", in.AttemptTimeout)
	}
	return nil
}

// ErrInvalidCapacityInput is wrapped by the *FieldError of
// CapacityInput.Validate.
var ErrInvalidCapacityInput = errors.New("invalid capacity input")

// AttemptLayer is the load of attempt number Attempt across all reviews.
type AttemptLayer struct {
	Attempt int
	// Rate is how many attempts with this number start per second: the
	// arrival rate times the chance that every earlier attempt timed out.
	Rate float64
	// Hold is the mean time one such attempt holds a worker: service time
	// when it answers, the whole attempt timeout when it does not.
	Hold time.Duration
	// Workers is Rate × Hold (Little's law): the mean number of busy
	// workers this layer needs.
	Workers float64
}

// Capacity is the worker-equivalents a load needs.
type Capacity struct {
	Layers []AttemptLayer
	// Workers is the sum over the layers.
	Workers float64
	// Baseline is Rate × ServiceTime: the workers one attempt layer needs
	// when every attempt answers in the service time.
	Baseline float64
	// EscalatedRate is the rate of reviews whose every attempt timed out.
	EscalatedRate float64
}

// PlanCapacity applies Little's law to each attempt layer. Attempt k starts
// for the fraction TimeoutRate^(k-1) of reviews; an attempt that answers
// holds a worker for ServiceTime, one that times out for the whole
// AttemptTimeout. Backoff waits hold no worker and are not counted.
func PlanCapacity(in CapacityInput) (Capacity, error) {
	if err := in.Validate(); err != nil {
		return Capacity{}, err
	}
	p := in.TimeoutRate
	holdSec := (1-p)*in.ServiceTime.Seconds() + p*in.AttemptTimeout.Seconds()
	hold := time.Duration(math.Round(holdSec * float64(time.Second)))
	c := Capacity{Baseline: in.Rate * in.ServiceTime.Seconds()}
	rate := in.Rate
	for k := 1; k <= in.MaxAttempts; k++ {
		l := AttemptLayer{Attempt: k, Rate: rate, Hold: hold, Workers: rate * holdSec}
		c.Layers = append(c.Layers, l)
		c.Workers += l.Workers
		rate *= p
	}
	c.EscalatedRate = rate
	return c, nil
}

// TimeoutSuggestion is a per-class policy suggestion from measured data.
type TimeoutSuggestion struct {
	AttemptTimeout time.Duration
	Budget         time.Duration
}

// SuggestTimeouts proposes an attempt timeout and a budget from a measured
// high percentile of attempt service time (p99): the attempt timeout is
// 1.5 × p99 rounded up to a whole 100 ms, so an attempt that would answer
// almost never times out; the budget leaves room for maxAttempts such
// attempts and the largest backoff wait between each two.
func SuggestTimeouts(p99 time.Duration, maxAttempts int, b Backoff) (TimeoutSuggestion, error) {
	switch {
	case p99 <= 0:
		return TimeoutSuggestion{}, &FieldError{Field: "p99", Reason: "no measured service time", Err: ErrInvalidCapacityInput}
	case maxAttempts < 1:
		return TimeoutSuggestion{}, &FieldError{Field: "max_attempts", Reason: fmt.Sprintf("must be at least 1, got %d", maxAttempts), Err: ErrInvalidCapacityInput}
	}
	step := 100 * time.Millisecond
	at := (p99*3/2 + step - 1) / step * step
	budget := time.Duration(maxAttempts) * at
	for n := 1; n < maxAttempts; n++ {
		budget += b.Delay(n, nil) + b.Jitter
	}
	return TimeoutSuggestion{AttemptTimeout: at, Budget: budget}, nil
}
