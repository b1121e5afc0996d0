package alert

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

func TestNumber(t *testing.T) {
	t.Parallel()
	for f, want := range map[float64]string{
		14.4 * (1 - 0.99):   "0.144",
		6 * (1 - 0.99):      "0.06",
		1 * (1 - 0.999):     "0.001",
		14.4 * (1 - 0.9995): "0.0072",
		0.99:                "0.99",
		3600:                "3600",
		0:                   "0",
	} {
		if got := number(f); got != want {
			t.Errorf("number(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestSelector(t *testing.T) {
	t.Parallel()
	for sel, ok := range map[string]bool{
		``:                                   true,
		`job="reviewledger"`:                 true,
		`job="reviewledger", env=~"prod|qa"`: true,
		`env!="dev",team!~"x.*"`:             true,
		`job=reviewledger`:                   false,
		`job="a"}`:                           false,
		`"a"="b"`:                            false,
		`job="a",`:                           false,
	} {
		if err := (Options{Selector: sel}).Validate(); (err == nil) != ok {
			t.Errorf("selector %q: %v, want ok %v", sel, err, ok)
		}
	}
}

// Every class gets its own thresholds from its objective, and its queue
// SLA; the recorded windows are the burn conditions' windows.
func TestRulesPerClass(t *testing.T) {
	t.Parallel()
	p := domain.DefaultPolicy()
	c := p.Classes["publishing_rule"]
	c.Objective, c.QueueSLA = 0.999, 20*time.Minute
	p.Classes["publishing_rule"] = c
	f, err := Rules(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	recorded := map[string]bool{}
	for _, r := range f.Groups[0].Rules {
		recorded[r.Record] = true
	}
	for _, b := range append(append([]Burn{}, PageBurns...), TicketBurns...) {
		for _, w := range []string{b.Long, b.Short} {
			if !recorded[ErrorRatio(w)] {
				t.Errorf("window %s is used by an alert but not recorded", w)
			}
		}
	}
	var exprs []string
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	all := strings.Join(exprs, "\n")
	for _, want := range []string{
		`ratio_rate1h{content_class="publishing_rule"} >= 0.0144`,
		`ratio_rate6h{content_class="publishing_rule"} >= 0.006`,
		`ratio_rate3d{content_class="publishing_rule"} > 0.001`,
		`ratio_rate1h{content_class="caption_suggestion"} >= 0.144`,
		`reviewledger_manual_queue_oldest_age_seconds{content_class="publishing_rule"}) > 1200`,
		`reviewledger_manual_queue_oldest_age_seconds{content_class="caption_suggestion"}) > 3600`,
	} {
		if !strings.Contains(all, want) {
			t.Errorf("no rule has %q", want)
		}
	}
}

func TestProviderFailingOption(t *testing.T) {
	t.Parallel()
	for share, ok := range map[float64]bool{0: true, 0.5: true, 0.05: true, 0.999: true, 1: false, 1.5: false, -0.1: false} {
		if err := (Options{ProviderFailing: share}).Validate(); (err == nil) != ok {
			t.Errorf("provider failing %v: %v, want ok %v", share, err, ok)
		}
	}
}

// The calls the failing share leaves out are exactly those that failed
// for a reason of our own, as the provider's circuit and retry budget
// leave them out.
func TestNotTheProviders(t *testing.T) {
	t.Parallel()
	for _, c := range []domain.Classification{domain.ClassDeadlineExceeded, domain.ClassTransportError, domain.ClassProviderUnavailable,
		domain.ClassRateLimited, domain.ClassInvalidFinding, domain.ClassProviderRefused, domain.ClassWorkerLost, domain.ClassCancelled,
		domain.ClassStoreUnavailable} {
		if got := slices.Contains(NotTheProviders, c); got != c.Recovery() {
			t.Errorf("%s: left out %v, but Recovery() is %v", c, got, c.Recovery())
		}
	}
}

// The outcomes the provider rules count as answered are the engine's
// labels of the two answers, and only those.
func TestAnsweredAreTheEnginesAnswers(t *testing.T) {
	t.Parallel()
	want := []string{provider.OutcomeFinding.String(), provider.OutcomeAccepted.String()}
	if !slices.Equal(Answered, want) {
		t.Fatalf("Answered = %q, want the engine's outcome labels %q", Answered, want)
	}
}

// The provider rules take their share and duration from the options, per
// provider.
func TestProviderRules(t *testing.T) {
	t.Parallel()
	f, err := Rules(domain.DefaultPolicy(), Options{Selector: `job="rl"`, ProviderFailing: 0.25, ProviderFailingFor: 15 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]Rule{}
	for _, r := range f.Groups[1].Rules {
		if r.Alert == AlertProvider || r.Alert == AlertShadow {
			rules[r.Alert] = r
		}
	}
	for alert, want := range map[string]struct{ severity, expr string }{
		AlertProvider: {"ticket", "sum by (provider) (rate(reviewledger_engine_provider_calls_total{job=\"rl\",outcome!~\"finding|accepted_async|worker_lost|cancelled|store_unavailable\"}[5m]))\n/\n" +
			"sum by (provider) (rate(reviewledger_engine_provider_calls_total{job=\"rl\",outcome!~\"worker_lost|cancelled|store_unavailable\"}[5m]))\n> 0.25"},
		AlertShadow: {"info", "sum by (provider) (rate(reviewledger_engine_shadow_calls_total{job=\"rl\",outcome=~\"timeout|error\"}[5m]))\n/\n" +
			"sum by (provider) (rate(reviewledger_engine_shadow_calls_total{job=\"rl\",outcome=~\"finding|timeout|error\"}[5m]))\n> 0.25"},
	} {
		r, ok := rules[alert]
		switch {
		case !ok:
			t.Errorf("no %s rule", alert)
		case r.Expr != want.expr:
			t.Errorf("%s: expr\n%s\nwant\n%s", alert, r.Expr, want.expr)
		case r.For != "15m" || r.Labels["severity"] != want.severity:
			t.Errorf("%s: for %s, labels %v, want 15m and severity %s", alert, r.For, r.Labels, want.severity)
		case !strings.Contains(r.Annotations["summary"], "{{ $labels.provider }} is failing more than 25% of its calls"):
			t.Errorf("%s: summary %q", alert, r.Annotations["summary"])
		}
	}
}
