package domain_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func TestPlanCapacity(t *testing.T) {
	c, err := domain.PlanCapacity(domain.CapacityInput{
		Rate: 20, ServiceTime: 400 * time.Millisecond, TimeoutRate: 0.1, MaxAttempts: 3, AttemptTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("baseline", c.Baseline, 8)
	// Each attempt holds a worker 0.9×0.4 s + 0.1×10 s = 1.36 s.
	if len(c.Layers) != 3 {
		t.Fatalf("layers = %d, want 3", len(c.Layers))
	}
	near("layer 1 rate", c.Layers[0].Rate, 20)
	near("layer 2 rate", c.Layers[1].Rate, 2)
	near("layer 3 rate", c.Layers[2].Rate, 0.2)
	near("layer 1 workers", c.Layers[0].Workers, 27.2)
	near("layer 2 workers", c.Layers[1].Workers, 2.72)
	near("layer 3 workers", c.Layers[2].Workers, 0.272)
	near("workers", c.Workers, 30.192)
	near("escalated", c.EscalatedRate, 0.02)
	if c.Layers[0].Hold != 1360*time.Millisecond {
		t.Errorf("hold = %s, want 1.36s", c.Layers[0].Hold)
	}

	// Without timeouts only the first layer works: exactly the baseline.
	c, err = domain.PlanCapacity(domain.CapacityInput{Rate: 20, ServiceTime: 400 * time.Millisecond, MaxAttempts: 3, AttemptTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	near("no-timeout workers", c.Workers, 8)
}

func TestPlanCapacityRefusesBadInput(t *testing.T) {
	good := domain.CapacityInput{Rate: 1, ServiceTime: time.Second, TimeoutRate: 0.5, MaxAttempts: 2, AttemptTimeout: time.Second}
	for field, mutate := range map[string]func(*domain.CapacityInput){
		"rate":            func(in *domain.CapacityInput) { in.Rate = 0 },
		"service_time":    func(in *domain.CapacityInput) { in.ServiceTime = -1 },
		"timeout_rate":    func(in *domain.CapacityInput) { in.TimeoutRate = 1 },
		"max_attempts":    func(in *domain.CapacityInput) { in.MaxAttempts = 0 },
		"attempt_timeout": func(in *domain.CapacityInput) { in.AttemptTimeout = 0 },
	} {
		in := good
		mutate(&in)
		_, err := domain.PlanCapacity(in)
		var fe *domain.FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, domain.ErrInvalidCapacityInput) {
			t.Errorf("%s: got %v, want a FieldError naming it", field, err)
		}
	}
	if _, err := domain.PlanCapacity(domain.CapacityInput{Rate: math.NaN(), ServiceTime: 1, MaxAttempts: 1, AttemptTimeout: 1}); err == nil {
		t.Error("NaN rate accepted")
	}
}

func TestSuggestTimeouts(t *testing.T) {
	b := domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond}
	s, err := domain.SuggestTimeouts(1234*time.Millisecond, 3, b)
	if err != nil {
		t.Fatal(err)
	}
	// 1.5 × 1.234 s = 1.851 s, rounded up to 1.9 s; budget 3 × 1.9 s +
	// (100+75) ms + (200+75) ms.
	if s.AttemptTimeout != 1900*time.Millisecond || s.Budget != 6150*time.Millisecond {
		t.Fatalf("got %+v, want 1.9s and 6.15s", s)
	}
	if _, err := domain.SuggestTimeouts(0, 3, b); !errors.Is(err, domain.ErrInvalidCapacityInput) {
		t.Fatalf("zero p99: got %v", err)
	}
}
