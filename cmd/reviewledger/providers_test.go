package main

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
)

var providerSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("a provider's secret, 32 bytes.."))

const routedPolicy = `
providers:
  managed:
    kind: http
    url: https://moderation.example/v1/review
    callback_secret_env: MANAGED_SECRET
    timeout: 5s
    concurrency: 64
    retry_budget: {ratio: 0.1, window: 30s, min_retries: 5}
    circuit: {failure_ratio: 0.6, window: 20s, min_calls: 10, open_for: 2s, probes: 2}
  selfhosted:
    kind: sim
    sim: {seed: 7, median: 40ms, p99: 200ms, reject_rate: 0.1}
classes:
  caption_suggestion:
    budget: 30s
    attempt_timeout: 10s
    max_attempts: 3
    backoff: {initial: 100ms, max: 2s}
    on_exhaustion: manual_review
    provider: managed
    fallbacks: [selfhosted, default]
    shadows: []
  transcript_import:
    budget: 30s
    attempt_timeout: 10s
    max_attempts: 3
    backoff: {initial: 100ms, max: 2s}
    on_exhaustion: manual_review
    fallbacks: selfhosted
    shadows: [managed]
`

func TestParsePolicyProviders(t *testing.T) {
	t.Setenv("MANAGED_SECRET", providerSecret)
	f, err := parsePolicyFile([]byte(routedPolicy))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Policy.Classes["caption_suggestion"].Route(); !reflect.DeepEqual(got, []string{"managed", "selfhosted", "default"}) {
		t.Fatalf("caption_suggestion route = %v", got)
	}
	tr := f.Policy.Classes["transcript_import"]
	if !reflect.DeepEqual(tr.Route(), []string{"default", "selfhosted"}) || !reflect.DeepEqual(tr.Shadows, []string{"managed"}) {
		t.Fatalf("transcript_import route %v shadows %v: fallbacks without provider follow the default one", tr.Route(), tr.Shadows)
	}
	m := f.Providers["managed"]
	switch {
	case m.Kind != "http" || m.URL != "https://moderation.example/v1/review" || m.Secret != providerSecret:
		t.Fatalf("managed = %+v", m)
	case m.Upstream.Timeout != 5*time.Second || m.Upstream.Concurrency != 64:
		t.Fatalf("managed timeout %s concurrency %d", m.Upstream.Timeout, m.Upstream.Concurrency)
	case m.Upstream.RetryBudget != 0.1 || m.Upstream.RetryBudgetWindow != 30*time.Second || m.Upstream.RetryBudgetMinRetries != 5:
		t.Fatalf("managed retry budget %+v", m.Upstream)
	case m.Upstream.Circuit.FailureRatio != 0.6 || m.Upstream.Circuit.OpenFor != 2*time.Second || m.Upstream.Circuit.Probes != 2 || m.Upstream.Circuit.MinCalls != 10:
		t.Fatalf("managed circuit %+v", m.Upstream.Circuit)
	}
	if s := f.Providers["selfhosted"]; s.Kind != "sim" || s.Sim.Seed != 7 || s.Sim.MedianLatency != 40*time.Millisecond || s.Sim.RejectRate != 0.1 {
		t.Fatalf("selfhosted = %+v", s)
	}
}

func TestParsePolicyProvidersRefuses(t *testing.T) {
	t.Setenv("MANAGED_SECRET", providerSecret)
	t.Setenv("SHORT_SECRET", "whsec_"+base64.StdEncoding.EncodeToString([]byte("short")))
	tests := []struct{ name, from, to, want string }{
		{"unknown provider of a class", "provider: managed", "provider: elsewhere",
			`class "caption_suggestion": provider: no provider named "elsewhere" in providers (declared: default, managed, selfhosted)`},
		{"unknown fallback", "fallbacks: [selfhosted, default]", "fallbacks: [selfhosted, nowhere]", `class "caption_suggestion": fallbacks: no provider named "nowhere"`},
		{"unknown shadow", "shadows: [managed]", "shadows: [ghost]", `class "transcript_import": shadows: no provider named "ghost"`},
		{"a shadow that decides", "shadows: [managed]", "shadows: [selfhosted]", `class "transcript_import": shadows: provider "selfhosted" also decides the class`},
		{"a provider twice in a route", "fallbacks: [selfhosted, default]", "fallbacks: [selfhosted, managed]", `class "caption_suggestion": fallbacks: provider "managed" is named twice`},
		{"two primaries", "provider: managed", "provider: [managed, selfhosted]", `class "caption_suggestion": provider: line`},
		{"unknown provider key", "timeout: 5s", "timeout: 5s\n    colour: blue", `provider "managed": colour: line 8: unknown key`},
		{"unknown kind", "kind: sim", "kind: grpc", `provider "selfhosted": kind: line`},
		{"http without url", "    url: https://moderation.example/v1/review\n", "", `provider "managed": url: line 4: required with kind: http`},
		{"bad url", "url: https://moderation.example/v1/review", "url: moderation.example", `provider "managed": url: line 5: want an absolute http(s) URL`},
		{"secret variable unset", "callback_secret_env: MANAGED_SECRET", "callback_secret_env: NOT_SET_ANYWHERE", `provider "managed": callback_secret_env: line 6: the environment variable NOT_SET_ANYWHERE is not set`},
		{"secret too short", "callback_secret_env: MANAGED_SECRET", "callback_secret_env: SHORT_SECRET", `provider "managed": callback_secret_env: key is 5 bytes`},
		{"http without a secret", "    callback_secret_env: MANAGED_SECRET\n", "", `provider "managed": callback_secret_env: line 4: required with kind: http`},
		{"zero timeout", "timeout: 5s", "timeout: 0s", `provider "managed": timeout: line 7: must be a positive duration`},
		{"concurrency 0", "concurrency: 64", "concurrency: 0", `provider "managed": concurrency: line 8: must be at least 1`},
		{"failure ratio above 1", "failure_ratio: 0.6", "failure_ratio: 1.5", `provider "managed": circuit.failure_ratio: line 10`},
		{"unknown circuit key", "probes: 2}", "probes: 2, half_open: 1}", `provider "managed": circuit.half_open: line 10: unknown key`},
		{"retry ratio 0", "ratio: 0.1", "ratio: 0", `provider "managed": retry_budget.ratio: line 9`},
		{"sim rate above 1", "reject_rate: 0.1", "reject_rate: 2", `provider "selfhosted": sim.reject_rate: line 13`},
		{"sim rates above 1 together", "reject_rate: 0.1", "timeout_rate: 0.6, error_rate: 0.5", `provider "selfhosted": sim: line 13: timeout_rate + error_rate + invalid_rate + async_rate must not exceed 1, got 1.1`},
		{"sim p99 below its median", "p99: 200ms", "p99: 20ms", `provider "selfhosted": sim.p99: line 13: 20ms is below sim.median 40ms`},
		{"circuit window under 10ms", "window: 20s, min_calls", "window: 5ms, min_calls", `provider "managed": circuit.window: line 10: must be at least 10ms, got 5ms`},
		{"the default provider declared", "  selfhosted:\n    kind: sim", "  default:\n    kind: sim", `provider "default": line 12: the name is the single-provider settings'`},
		{"a bad provider name", "  selfhosted:\n    kind: sim", "  Self Hosted:\n    kind: sim", `provider "Self Hosted": line 12: not a provider name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := strings.Replace(routedPolicy, tc.from, tc.to, 1)
			if doc == routedPolicy {
				t.Fatalf("the case changes nothing: %q not in the policy", tc.from)
			}
			_, err := parsePolicyFile([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// The example of docs/contracts.md, "Providers", is a policy file serve
// accepts, with the routes the page gives.
func TestContractsProvidersExample(t *testing.T) {
	raw, err := os.ReadFile("../../docs/contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "\n### Providers\n")
	if !ok {
		t.Fatal(`docs/contracts.md has no "### Providers" section`)
	}
	_, block, ok := strings.Cut(section, "```yaml\n")
	if !ok {
		t.Fatal(`no yaml block in docs/contracts.md, "Providers"`)
	}
	example, _, _ := strings.Cut(block, "```")
	t.Setenv("MANAGED_CALLBACK_SECRET", providerSecret)
	t.Setenv("CANDIDATE_CALLBACK_SECRET", "whsec_"+base64.StdEncoding.EncodeToString([]byte("the candidate's secret, 32 bytes")))
	f, err := parsePolicyFile([]byte(example))
	if err != nil {
		t.Fatalf("the example is refused: %v", err)
	}
	routes := map[string][]string{
		"caption_suggestion": {"managed", "selfhosted", "default"},
		"transcript_import":  {"default", "managed"},
		"publishing_rule":    {"default"},
	}
	for class, want := range routes {
		if got := f.Policy.Classes[class].Route(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: route %v, want %v", class, got, want)
		}
	}
	if got := f.Policy.Classes["caption_suggestion"].Shadows; !reflect.DeepEqual(got, []string{"candidate"}) {
		t.Errorf("caption_suggestion: shadows %v, want [candidate]", got)
	}
	for name, spec := range f.Providers {
		if spec.Upstream.Circuit.Window != 0 && spec.Upstream.Circuit.Window < 10*time.Millisecond {
			t.Errorf("provider %q: circuit.window %s, below the engine's 10ms", name, spec.Upstream.Circuit.Window)
		}
	}
	// serve builds each provider from it: the http adapters and the
	// simulator with its settings.
	signer, err := provider.NewSigner(providerSecret)
	if err != nil {
		t.Fatal(err)
	}
	deliver := func(context.Context, string, http.Header, []byte) error { return nil }
	ups, stop, err := EngineConfig{}.upstreams(&Config{Providers: f.Providers}, signer, deliver)
	if err != nil {
		t.Fatalf("the example's providers are refused: %v", err)
	}
	defer func() { _ = stop() }()
	if len(ups) != 3 {
		t.Fatalf("%d providers built, want 3", len(ups))
	}
}
