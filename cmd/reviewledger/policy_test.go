package main

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

const validPolicy = `
classes:
  caption_suggestion:
    budget: 30s            # end-to-end deadline from submission
    attempt_timeout: 10s
    max_attempts: 3
    backoff: {initial: 100ms, max: 2s, jitter: 75ms}
    on_exhaustion: manual_review
    human_gate: false
    priority: 1
  publishing_rule:
    budget: 1m
    attempt_timeout: 20s
    max_attempts: 2
    backoff:
      initial: 250ms
      max: 1s
    on_exhaustion: rejected
    human_gate: true
    priority: 3
    approvals: 2
    objective: 0.995
    queue_sla: 15m
    claims: required
    manual_sla: 4h
`

func TestParsePolicy(t *testing.T) {
	p, err := parsePolicy([]byte(validPolicy))
	if err != nil {
		t.Fatal(err)
	}
	want := domain.ClassPolicy{
		Budget: 30 * time.Second, AttemptTimeout: 10 * time.Second, MaxAttempts: 3,
		Backoff:      domain.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second, Jitter: 75 * time.Millisecond},
		OnExhaustion: domain.ExhaustToManualReview, Priority: 1,
	}
	if got := p.Classes["caption_suggestion"]; !reflect.DeepEqual(got, want) {
		t.Fatalf("caption_suggestion: %+v, want %+v", got, want)
	}
	if got := p.Classes["publishing_rule"]; !got.HumanGate || got.Approvals != 2 || got.OnExhaustion != domain.ExhaustToRejected || got.Budget != time.Minute {
		t.Fatalf("publishing_rule: %+v", got)
	}
	if got := p.Classes["publishing_rule"]; got.SLOObjective() != 0.995 || got.ManualQueueSLA() != 15*time.Minute {
		t.Fatalf("publishing_rule objective %v, queue SLA %v", got.SLOObjective(), got.ManualQueueSLA())
	}
	if got := p.Classes["publishing_rule"]; !got.ClaimsRequired() || got.ManualSLA != 4*time.Hour {
		t.Fatalf("publishing_rule claims %q, manual_sla %v", got.Claims, got.ManualSLA)
	}
	if got := p.Classes["caption_suggestion"]; got.ClaimMode() != domain.ClaimsOptional || got.ManualSLA != 0 {
		t.Fatalf("caption_suggestion claims %q, manual_sla %v", got.ClaimMode(), got.ManualSLA)
	}
	if got := p.Classes["caption_suggestion"]; got.SLOObjective() != domain.DefaultObjective || got.ManualQueueSLA() != domain.DefaultQueueSLA {
		t.Fatalf("caption_suggestion without objective or queue_sla: %v, %v", got.SLOObjective(), got.ManualQueueSLA())
	}
}

func TestParsePolicyRefuses(t *testing.T) {
	class := func(body string) string {
		return "classes:\n  caption_suggestion:\n    budget: 30s\n    attempt_timeout: 10s\n    max_attempts: 3\n    backoff: {initial: 100ms, max: 2s}\n    on_exhaustion: manual_review\n" + body
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown top-level key", "classes: {}\nextra: 1\n", `extra`},
		{"unknown class key", class("    budgett: 1s\n"), `class "caption_suggestion": budgett: line 8: unknown key`},
		{"unknown backoff key", strings.Replace(class(""), "max: 2s}", "max: 2s, maximum: 3s}", 1), `class "caption_suggestion": backoff.maximum`},
		{"malformed duration", strings.Replace(class(""), "budget: 30s", "budget: soon", 1), `class "caption_suggestion": budget: line 3`},
		{"negative duration", strings.Replace(class(""), "budget: 30s", "budget: -30s", 1), `class "caption_suggestion": budget`},
		{"zero duration", strings.Replace(class(""), "attempt_timeout: 10s", "attempt_timeout: 0s", 1), `class "caption_suggestion": attempt_timeout`},
		{"zero jitter", strings.Replace(class(""), "max: 2s}", "max: 2s, jitter: 0s}", 1), `class "caption_suggestion": backoff.jitter`},
		{"negative jitter", strings.Replace(class(""), "max: 2s}", "max: 2s, jitter: -5ms}", 1), `class "caption_suggestion": backoff.jitter`},
		{"attempt timeout above budget", strings.Replace(class(""), "attempt_timeout: 10s", "attempt_timeout: 40s", 1), `class "caption_suggestion": attempt_timeout`},
		{"unknown on_exhaustion", strings.Replace(class(""), "on_exhaustion: manual_review", "on_exhaustion: retry", 1), `class "caption_suggestion": on_exhaustion`},
		{"objective of 1", class("    objective: 1\n"), `class "caption_suggestion": objective: line 8`},
		{"objective as a percentage", class("    objective: 99\n"), `class "caption_suggestion": objective: line 8`},
		{"objective not a number", class("    objective: high\n"), `class "caption_suggestion": objective: line 8`},
		{"zero objective", class("    objective: 0\n"), `class "caption_suggestion": objective`},
		{"zero queue_sla", class("    queue_sla: 0s\n"), `class "caption_suggestion": queue_sla: line 8`},
		{"malformed queue_sla", class("    queue_sla: an hour\n"), `class "caption_suggestion": queue_sla: line 8`},
		{"unknown claims", class("    claims: always\n"), `class "caption_suggestion": claims: must be optional or required`},
		{"claims not a scalar", class("    claims: [required]\n"), `class "caption_suggestion": claims: line 8`},
		{"zero manual_sla", class("    manual_sla: 0s\n"), `class "caption_suggestion": manual_sla: line 8`},
		{"negative manual_sla", class("    manual_sla: -1h\n"), `class "caption_suggestion": manual_sla: line 8`},
		{"malformed manual_sla", class("    manual_sla: soon\n"), `class "caption_suggestion": manual_sla: line 8`},
		{"key twice", class("    budget: 20s\n"), `class "caption_suggestion": budget: line 8: key given twice`},
		{"not a mapping", "classes:\n  caption_suggestion: 3\n", `class "caption_suggestion"`},
		{"no classes", "classes: {}\n", `no content classes`},
		{"empty file", "", `empty policy file`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parsePolicy([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
