package domain_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func TestClassPolicyValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(p *domain.ClassPolicy)
		key    string // "" when valid
	}{
		{"valid", func(*domain.ClassPolicy) {}, ""},
		{"attempt_timeout equal to budget", func(p *domain.ClassPolicy) { p.AttemptTimeout = p.Budget }, ""},
		{"no jitter", func(p *domain.ClassPolicy) { p.Backoff.Jitter = 0 }, ""},
		{"backoff max equal to initial", func(p *domain.ClassPolicy) { p.Backoff.Max = p.Backoff.Initial }, ""},
		{"one attempt", func(p *domain.ClassPolicy) { p.MaxAttempts = 1 }, ""},
		{"approvals unset", func(p *domain.ClassPolicy) { p.Approvals = 0 }, ""},
		{"fail closed", func(p *domain.ClassPolicy) { p.OnExhaustion = domain.ExhaustToRejected }, ""},
		{"negative priority", func(p *domain.ClassPolicy) { p.Priority = -1 }, ""},
		{"objective set", func(p *domain.ClassPolicy) { p.Objective = 0.999 }, ""},
		{"queue_sla set", func(p *domain.ClassPolicy) { p.QueueSLA = 15 * time.Minute }, ""},
		{"claims optional", func(p *domain.ClassPolicy) { p.Claims = domain.ClaimsOptional }, ""},
		{"claims required", func(p *domain.ClassPolicy) { p.Claims = domain.ClaimsRequired }, ""},
		{"manual_sla set", func(p *domain.ClassPolicy) { p.ManualSLA = 4 * time.Hour }, ""},
		{"unknown claims", func(p *domain.ClassPolicy) { p.Claims = "always" }, "claims"},
		{"claims in the wrong case", func(p *domain.ClassPolicy) { p.Claims = "Required" }, "claims"},
		{"negative manual_sla", func(p *domain.ClassPolicy) { p.ManualSLA = -time.Minute }, "manual_sla"},
		{"sub-millisecond manual_sla", func(p *domain.ClassPolicy) { p.ManualSLA = time.Microsecond }, "manual_sla"},

		{"zero budget", func(p *domain.ClassPolicy) { p.Budget = 0 }, "budget"},
		{"negative budget", func(p *domain.ClassPolicy) { p.Budget = -time.Second }, "budget"},
		{"zero attempt_timeout", func(p *domain.ClassPolicy) { p.AttemptTimeout = 0 }, "attempt_timeout"},
		{"negative attempt_timeout", func(p *domain.ClassPolicy) { p.AttemptTimeout = -time.Second }, "attempt_timeout"},
		{"sub-millisecond attempt_timeout", func(p *domain.ClassPolicy) { p.AttemptTimeout = 500 * time.Microsecond }, "attempt_timeout"},
		{"sub-millisecond budget", func(p *domain.ClassPolicy) { p.Budget, p.AttemptTimeout = time.Microsecond, time.Microsecond }, "budget"},
		{"attempt_timeout above budget", func(p *domain.ClassPolicy) { p.AttemptTimeout = p.Budget + time.Nanosecond }, "attempt_timeout"},
		{"zero backoff initial", func(p *domain.ClassPolicy) { p.Backoff.Initial = 0 }, "backoff.initial"},
		{"negative backoff initial", func(p *domain.ClassPolicy) { p.Backoff.Initial = -time.Millisecond }, "backoff.initial"},
		{"zero backoff max", func(p *domain.ClassPolicy) { p.Backoff.Max = 0 }, "backoff.max"},
		{"negative backoff max", func(p *domain.ClassPolicy) { p.Backoff.Max = -time.Second }, "backoff.max"},
		{"backoff max below initial", func(p *domain.ClassPolicy) { p.Backoff.Max = p.Backoff.Initial - 1 }, "backoff.max"},
		{"negative jitter", func(p *domain.ClassPolicy) { p.Backoff.Jitter = -time.Millisecond }, "backoff.jitter"},
		{"zero max_attempts", func(p *domain.ClassPolicy) { p.MaxAttempts = 0 }, "max_attempts"},
		{"negative max_attempts", func(p *domain.ClassPolicy) { p.MaxAttempts = -3 }, "max_attempts"},
		{"negative approvals", func(p *domain.ClassPolicy) { p.Approvals = -1 }, "approvals"},
		{"objective of 1", func(p *domain.ClassPolicy) { p.Objective = 1 }, "objective"},
		{"objective above 1", func(p *domain.ClassPolicy) { p.Objective = 99 }, "objective"},
		{"negative objective", func(p *domain.ClassPolicy) { p.Objective = -0.5 }, "objective"},
		{"negative queue_sla", func(p *domain.ClassPolicy) { p.QueueSLA = -time.Minute }, "queue_sla"},
		{"empty on_exhaustion", func(p *domain.ClassPolicy) { p.OnExhaustion = "" }, "on_exhaustion"},
		{"unknown on_exhaustion", func(p *domain.ClassPolicy) { p.OnExhaustion = "escalate" }, "on_exhaustion"},
		{"on_exhaustion in the wrong case", func(p *domain.ClassPolicy) { p.OnExhaustion = "Rejected" }, "on_exhaustion"},
		{"on_exhaustion accepted", func(p *domain.ClassPolicy) { p.OnExhaustion = "accepted" }, "on_exhaustion"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := automated()
			tc.change(&p)
			err := p.Validate("caption_suggestion")
			if tc.key == "" {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			checkPolicyError(t, err, "caption_suggestion", tc.key)
		})
	}
}

func checkPolicyError(t *testing.T, err error, class, key string) {
	t.Helper()
	var pe *domain.PolicyError
	if !errors.As(err, &pe) {
		t.Fatalf("error = %v, want a *PolicyError", err)
	}
	if pe.Class != class || pe.Key != key {
		t.Fatalf("error names class %q key %q, want class %q key %q", pe.Class, pe.Key, class, key)
	}
	if !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Fatalf("error %v does not match ErrInvalidPolicy", err)
	}
	if msg := err.Error(); !strings.Contains(msg, key) || !strings.Contains(msg, class) || pe.Reason == "" {
		t.Fatalf("message %q does not name class %q and key %q with a reason", msg, class, key)
	}
}

func TestPolicyValidate(t *testing.T) {
	t.Parallel()
	t.Run("default policy is valid", func(t *testing.T) {
		t.Parallel()
		if err := domain.DefaultPolicy().Validate(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("no classes", func(t *testing.T) {
		t.Parallel()
		checkPolicyError(t, domain.Policy{}.Validate(), "", "classes")
	})
	t.Run("names the first bad class in name order", func(t *testing.T) {
		t.Parallel()
		badBudget, badTries := automated(), automated()
		badBudget.Budget = 0
		badTries.MaxAttempts = 0
		p := domain.Policy{Classes: map[string]domain.ClassPolicy{"b_class": badBudget, "c_class": automated(), "a_good": automated(), "d_class": badTries}}
		checkPolicyError(t, p.Validate(), "b_class", "budget")
	})
}

// TestDefaultPolicy pins the built-in classes: caption_suggestion is the
// example of docs/contracts.md §3.
func TestDefaultPolicy(t *testing.T) {
	t.Parallel()
	p := domain.DefaultPolicy()
	if got, want := p.Names(), []string{"caption_suggestion", "publishing_rule", "transcript_import"}; !slices.Equal(got, want) {
		t.Fatalf("classes = %v, want %v", got, want)
	}
	caption, err := p.Class("caption_suggestion")
	if err != nil {
		t.Fatal(err)
	}
	want := domain.ClassPolicy{
		Budget: 30 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, HumanGate: false, Priority: 1,
	}
	if !reflect.DeepEqual(caption, want) {
		t.Fatalf("caption_suggestion = %+v, want %+v", caption, want)
	}
	rule, err := p.Class("publishing_rule")
	if err != nil {
		t.Fatal(err)
	}
	// Four-eyes is opt-in (approvals: N in a policy file): a default class
	// that silently needed two moderators would surprise everyone.
	if !rule.HumanGate || rule.OnExhaustion != domain.ExhaustToRejected || rule.RequiredApprovals() != 1 {
		t.Fatalf("publishing_rule = %+v, want human gate, fail closed, one approval", rule)
	}

	_, err = p.Class("podcast")
	var fe *domain.FieldError
	if !errors.As(err, &fe) || fe.Field != "content_class" || !errors.Is(err, domain.ErrUnknownClass) || !strings.Contains(err.Error(), "podcast") {
		t.Fatalf("Class(podcast) error = %v, want a content_class field error wrapping ErrUnknownClass", err)
	}
}

func TestServiceLevelDefaults(t *testing.T) {
	t.Parallel()
	var unset domain.ClassPolicy
	if got := unset.SLOObjective(); got != domain.DefaultObjective {
		t.Errorf("unset objective = %v, want %v", got, domain.DefaultObjective)
	}
	if got := unset.ManualQueueSLA(); got != domain.DefaultQueueSLA {
		t.Errorf("unset queue SLA = %v, want %v", got, domain.DefaultQueueSLA)
	}
	set := domain.ClassPolicy{Objective: 0.995, QueueSLA: 20 * time.Minute}
	if set.SLOObjective() != 0.995 || set.ManualQueueSLA() != 20*time.Minute {
		t.Errorf("set: objective %v, queue SLA %v", set.SLOObjective(), set.ManualQueueSLA())
	}
	if b := set.ErrorBudget(); b < 0.00499 || b > 0.00501 {
		t.Errorf("error budget of 0.995 = %v, want 0.005", b)
	}
}

func TestRequiredApprovals(t *testing.T) {
	t.Parallel()
	for approvals, want := range map[int]int{0: 1, 1: 1, 2: 2, 3: 3} {
		if got := (domain.ClassPolicy{Approvals: approvals}).RequiredApprovals(); got != want {
			t.Errorf("Approvals %d: RequiredApprovals = %d, want %d", approvals, got, want)
		}
	}
}

// TestSnapshotRoundTrip checks that a review keeps the policy it was
// submitted under: the snapshot survives JSON and gives back the same
// policy (with the approvals count made explicit).
func TestSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	policies := domain.DefaultPolicy().Classes
	policies["four_eyes"] = fourEyes()
	policies["fail_closed"] = failClosed()
	required := automated()
	required.Claims, required.ManualSLA = domain.ClaimsRequired, 4*time.Hour
	policies["claims_required"] = required
	for name, p := range policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := p.Snapshot()
			b, err := json.Marshal(s)
			if err != nil {
				t.Fatal(err)
			}
			var back domain.PolicySnapshot
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			if back != s {
				t.Fatalf("snapshot after JSON = %+v, want %+v", back, s)
			}
			got := back.ClassPolicy()
			want := p
			want.Approvals = p.RequiredApprovals()
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("policy from snapshot = %+v, want %+v", got, want)
			}
			if err := got.Validate(name); err != nil {
				t.Fatalf("policy from snapshot does not validate: %v", err)
			}
			if got.Snapshot() != s {
				t.Fatalf("snapshot of the restored policy = %+v, want %+v", got.Snapshot(), s)
			}
		})
	}
	t.Run("JSON field names", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(automated().Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		const want = `{"budget_ms":30000,"attempt_timeout_ms":10000,"max_attempts":3,"backoff_initial_ms":100,"backoff_max_ms":2000,"backoff_jitter_ms":75,"on_exhaustion":"manual_review","human_gate":false,"priority":1,"approvals":1}`
		if string(b) != want {
			t.Fatalf("snapshot JSON =\n%s\nwant\n%s", b, want)
		}
		p := automated()
		p.Claims, p.ManualSLA = domain.ClaimsRequired, 90*time.Minute
		b, err = json.Marshal(p.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		const withTeam = `{"budget_ms":30000,"attempt_timeout_ms":10000,"max_attempts":3,"backoff_initial_ms":100,"backoff_max_ms":2000,"backoff_jitter_ms":75,"on_exhaustion":"manual_review","human_gate":false,"priority":1,"approvals":1,"claims":"required","manual_sla_ms":5400000}`
		if string(b) != withTeam {
			t.Fatalf("snapshot JSON =\n%s\nwant\n%s", b, withTeam)
		}
	})
}
