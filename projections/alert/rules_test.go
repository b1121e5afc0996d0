package alert

import (
	"strings"
	"testing"
	"time"

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
