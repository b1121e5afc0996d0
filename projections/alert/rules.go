// Package alert writes the Prometheus rules that watch reviewledger's
// service levels, from the policy: recording rules for each class's error
// ratio over the windows of the multi-window, multi-burn-rate alerts
// (Google's SRE workbook, "Alerting on SLOs"), the burn-rate alerts
// themselves with each class's objective, manual-queue age against each
// class's queue SLA, the provider's retry budget running out, a provider
// (or a shadow provider) failing most of its calls, and the SLIs going
// missing.
//
// The rules read the SLIs of package projections, which the process
// running the SLO projection exports, and the engine's per-process
// counters; every expression sums over processes, so it holds whichever
// process that is.
package alert

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections"
)

// Windows are the error-ratio windows recorded, shortest first.
var Windows = []string{"5m", "30m", "1h", "6h", "3d"}

// Burn is one multi-window burn-rate condition: the error ratio over both
// windows is at least (or, for a ticket, above) Factor times the class's
// error budget.
type Burn struct {
	Long, Short string
	Factor      float64
}

// The burn-rate conditions of the workbook for a 30-day objective: page
// when 2% of the budget goes in an hour (14.4×) or 5% in six hours (6×);
// ticket when the budget would be gone before the period ends (above 1×
// over three days).
var (
	PageBurns   = []Burn{{"1h", "5m", 14.4}, {"6h", "30m", 6}}
	TicketBurns = []Burn{{"3d", "6h", 1}}
)

// Options tune the rules.
type Options struct {
	// Selector is added to every metric selector, such as
	// job="reviewledger", to read only this service's series.
	Selector string
	// QueueFor, RetryFor and AbsentFor are how long the manual-queue,
	// retry-budget and missing-SLI conditions must hold before alerting.
	// Defaults 5m, 10m, 10m.
	QueueFor, RetryFor, AbsentFor time.Duration
	// ProviderFailing is the share of a provider's calls over
	// ProviderWindow that must fail, for ProviderFailingFor, before
	// ProviderFailing (or, for a shadow provider, ShadowProviderFailing)
	// fires. Defaults 0.5 (a circuit's default failure_ratio) and 10m.
	ProviderFailing    float64
	ProviderFailingFor time.Duration
}

func (o *Options) setDefaults() {
	if o.QueueFor == 0 {
		o.QueueFor = 5 * time.Minute
	}
	if o.RetryFor == 0 {
		o.RetryFor = 10 * time.Minute
	}
	if o.AbsentFor == 0 {
		o.AbsentFor = 10 * time.Minute
	}
	if o.ProviderFailing == 0 {
		o.ProviderFailing = 0.5
	}
	if o.ProviderFailingFor == 0 {
		o.ProviderFailingFor = 10 * time.Minute
	}
}

// matcher is one label matcher: name, operator, double-quoted value.
var matcher = regexp.MustCompile(`^\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=|!=|=~|!~)\s*"(?:[^"\\]|\\.)*"\s*$`)

// Validate checks the selector (label matchers separated by commas) and
// the failing share (zero takes the default).
func (o Options) Validate() error {
	if o.ProviderFailing < 0 || o.ProviderFailing >= 1 {
		return fmt.Errorf("provider-failing: must be a share above 0 and below 1, got %v", o.ProviderFailing)
	}
	if o.Selector == "" {
		return nil
	}
	for _, m := range strings.Split(o.Selector, ",") {
		if !matcher.MatchString(m) {
			return fmt.Errorf("selector: %q is not a label matcher such as job=\"reviewledger\"", strings.TrimSpace(m))
		}
	}
	return nil
}

// File is a Prometheus rule file.
type File struct {
	Groups []Group `yaml:"groups"`
}

// Group is a rule group.
type Group struct {
	Name     string `yaml:"name"`
	Interval string `yaml:"interval,omitempty"`
	Rules    []Rule `yaml:"rules"`
}

// Rule is a recording or an alerting rule.
type Rule struct {
	Record      string            `yaml:"record,omitempty"`
	Alert       string            `yaml:"alert,omitempty"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for,omitempty"`
	Labels      map[string]string `yaml:"labels,omitempty"`
	Annotations map[string]string `yaml:"annotations,omitempty"`
}

// Recording rule and alert names.
const (
	AlertBurn        = "ReviewErrorBudgetBurn"
	AlertQueueAge    = "ManualQueueOlderThanSLA"
	AlertRetryBudget = "ProviderRetryBudgetExhausted"
	AlertProvider    = "ProviderFailing"
	AlertShadow      = "ShadowProviderFailing"
	AlertSLIAbsent   = "ReviewSLIsMissing"
)

// The engine's call counters (package api/engine), per process, by
// provider and outcome.
const (
	MetricProviderCalls = "reviewledger_engine_provider_calls_total"
	MetricShadowCalls   = "reviewledger_engine_shadow_calls_total"
)

// ProviderWindow is the window of the failing share of ProviderFailing and
// ShadowProviderFailing.
const ProviderWindow = "5m"

// NotTheProviders are the failure classifications of calls we stopped
// ourselves (domain.Classification.Recovery: the worker lost, the process
// shutting down, the store unavailable): like the provider's circuit and
// its retry budget, the failing share counts them neither as failures nor
// as calls.
var NotTheProviders = []domain.Classification{domain.ClassWorkerLost, domain.ClassCancelled, domain.ClassStoreUnavailable}

// Answered are the outcomes of a call the provider answered
// (provider.OutcomeFinding and provider.OutcomeAccepted, as the engine's
// call metric labels them; rules_test.go holds them equal): the rules
// read the metric's labels, not the engine's types.
var Answered = []string{"finding", "accepted_async"}

// ErrorRatio is the name of the recording rule of the error ratio over
// window.
func ErrorRatio(window string) string {
	return "content_class:reviewledger_review_errors:ratio_rate" + window
}

// Rules returns the rule groups for policy p.
func Rules(p domain.Policy, opts Options) (File, error) {
	opts.setDefaults()
	if err := opts.Validate(); err != nil {
		return File{}, err
	}
	sel := func(matchers ...string) string {
		if opts.Selector != "" {
			matchers = append([]string{opts.Selector}, matchers...)
		}
		if len(matchers) == 0 {
			return ""
		}
		return "{" + strings.Join(matchers, ",") + "}"
	}
	// The burn-rate alerts are in the group of the ratios they read:
	// rules of a group are evaluated in order, so an alert reads the
	// ratios of the same evaluation, never those of the one before.
	rec := Group{Name: "reviewledger-slo"}
	for _, w := range Windows {
		rec.Rules = append(rec.Rules, Rule{
			Record: ErrorRatio(w),
			Expr: fmt.Sprintf("sum by (content_class) (rate(%s%s[%s]))\n/\nsum by (content_class) (rate(%s%s[%s]))",
				projections.MetricOutcomes, sel(`within_budget="false"`), w, projections.MetricOutcomes, sel(), w),
		})
	}
	for _, class := range p.Names() {
		c := p.Classes[class]
		rec.Rules = append(rec.Rules, Rule{
			Record: "content_class:reviewledger_review_objective:ratio",
			Expr:   fmt.Sprintf("vector(%s)", number(c.SLOObjective())),
			Labels: map[string]string{"content_class": class},
		})
	}

	for _, class := range p.Names() {
		c := p.Classes[class]
		budget := c.ErrorBudget()
		rec.Rules = append(rec.Rules,
			burnRule(class, "page", ">=", PageBurns, budget, c.SLOObjective()),
			burnRule(class, "ticket", ">", TicketBurns, budget, c.SLOObjective()))
	}
	alerts := Group{Name: "reviewledger-operations"}
	for _, class := range p.Names() {
		sla := p.Classes[class].ManualQueueSLA()
		alerts.Rules = append(alerts.Rules, Rule{
			Alert:  AlertQueueAge,
			Expr:   fmt.Sprintf("max by (content_class) (%s%s) > %s", projections.MetricQueueOldest, sel(fmt.Sprintf("content_class=%q", class)), number(sla.Seconds())),
			For:    promDuration(opts.QueueFor),
			Labels: map[string]string{"severity": "ticket", "content_class": class},
			Annotations: map[string]string{
				"summary":     fmt.Sprintf("A %s review has waited in the manual queue longer than its SLA (%s)", class, promDuration(sla)),
				"description": "The oldest {{ $labels.content_class }} review has waited {{ $value | humanizeDuration }} for a moderator; the class's queue_sla is " + promDuration(sla) + ".",
			},
		})
	}
	alerts.Rules = append(alerts.Rules,
		Rule{
			Alert:  AlertRetryBudget,
			Expr:   fmt.Sprintf("sum by (provider) (rate(reviewledger_engine_retry_budget_exhausted_total%s[5m])) > 0", sel()),
			For:    promDuration(opts.RetryFor),
			Labels: map[string]string{"severity": "ticket"},
			Annotations: map[string]string{
				"summary":     "Retries to the provider are being refused: its retry budget is spent",
				"description": "{{ $value | humanize }} retries a second to {{ $labels.provider }} were refused over the last 5 minutes; reviews that needed them escalate (retry_budget_exhausted). The provider is failing more attempts than the budget (REVIEWLEDGER_RETRY_BUDGET) allows to retry.",
			},
		},
		providerRule(sel, opts),
		shadowRule(sel, opts),
		Rule{
			Alert:  AlertSLIAbsent,
			Expr:   fmt.Sprintf("absent(%s%s)", projections.MetricQueueDepth, sel()),
			For:    promDuration(opts.AbsentFor),
			Labels: map[string]string{"severity": "ticket"},
			Annotations: map[string]string{
				"summary":     "No process exports the review SLIs: the SLO alerts are blind",
				"description": "No reviewledger process runs the SLO projection (or none is scraped), so reviews are not counted and no burn-rate alert can fire. Check that a process with the projector role is up and scraped.",
			},
		})
	return File{Groups: []Group{rec, alerts}}, nil
}

// providerRule fires per provider when the share of its calls over
// ProviderWindow that failed (neither a finding nor accepted for a
// callback, nor stopped by us) is above opts.ProviderFailing.
func providerRule(sel func(...string) string, opts Options) Rule {
	ours := make([]string, len(NotTheProviders))
	for i, c := range NotTheProviders {
		ours[i] = string(c)
	}
	answered := append(slices.Clone(Answered), ours...)
	share := number(opts.ProviderFailing)
	return Rule{
		Alert: AlertProvider,
		Expr: fmt.Sprintf("sum by (provider) (rate(%s%s[%s]))\n/\nsum by (provider) (rate(%s%s[%s]))\n> %s",
			MetricProviderCalls, sel(fmt.Sprintf("outcome!~%q", strings.Join(answered, "|"))), ProviderWindow,
			MetricProviderCalls, sel(fmt.Sprintf("outcome!~%q", strings.Join(ours, "|"))), ProviderWindow, share),
		For:    promDuration(opts.ProviderFailingFor),
		Labels: map[string]string{"severity": "ticket"},
		Annotations: map[string]string{
			"summary": "Provider {{ $labels.provider }} is failing more than " + percent(opts.ProviderFailing) + " of its calls",
			"description": "{{ $value | humanizePercentage }} of the calls to {{ $labels.provider }} over the last " + ProviderWindow +
				" failed (timeouts, transport errors, 5xx, 429, refusals, invalid findings; calls we stopped ourselves are not counted). " +
				"Failover is automatic: a failed attempt is retried on its class's next provider, and once the provider's circuit opens it is passed over but probed; " +
				"a class with no fallback keeps retrying it and its reviews escalate as their budgets run out. " +
				"Check the provider's health, its circuit and its calls by outcome (reviewledger_engine_provider_calls_total); see docs/operations.md, \"Providers failing\".",
		},
	}
}

// shadowRule fires per shadow provider when the share of its calls over
// ProviderWindow that timed out or failed is above opts.ProviderFailing;
// calls skipped for want of a shadow slot were never made.
func shadowRule(sel func(...string) string, opts Options) Rule {
	failed := string(domain.ShadowTimeout) + "|" + string(domain.ShadowError)
	made := strings.Join([]string{string(domain.ShadowFinding), failed}, "|")
	return Rule{
		Alert: AlertShadow,
		Expr: fmt.Sprintf("sum by (provider) (rate(%s%s[%s]))\n/\nsum by (provider) (rate(%s%s[%s]))\n> %s",
			MetricShadowCalls, sel(fmt.Sprintf("outcome=~%q", failed)), ProviderWindow,
			MetricShadowCalls, sel(fmt.Sprintf("outcome=~%q", made)), ProviderWindow, number(opts.ProviderFailing)),
		For:    promDuration(opts.ProviderFailingFor),
		Labels: map[string]string{"severity": "info"},
		Annotations: map[string]string{
			"summary": "Shadow provider {{ $labels.provider }} is failing more than " + percent(opts.ProviderFailing) + " of its calls",
			"description": "{{ $value | humanizePercentage }} of the shadow calls to {{ $labels.provider }} over the last " + ProviderWindow +
				" timed out or failed. A shadow never decides a review, so nothing is at risk, but its observations (the ShadowObserved events of shadows-<review_id>) say little about it until it answers: " +
				"check the provider before judging it, or take it out of its classes' shadows; see docs/operations.md, \"Providers failing\".",
		},
	}
}

// percent formats a share as a percentage: 0.5 is 50%.
func percent(f float64) string {
	return number(f*100) + "%"
}

// burnRule is the alert of one severity for class: any of burns holds.
func burnRule(class, severity, op string, burns []Burn, budget, objective float64) Rule {
	var conds []string
	for _, b := range burns {
		threshold := number(b.Factor * budget)
		conds = append(conds, fmt.Sprintf("(\n  %s{content_class=%q} %s %s\nand\n  %s{content_class=%q} %s %s\n)",
			ErrorRatio(b.Long), class, op, threshold, ErrorRatio(b.Short), class, op, threshold))
	}
	var what []string
	for _, b := range burns {
		what = append(what, fmt.Sprintf("%s× over %s and %s", number(b.Factor), b.Long, b.Short))
	}
	return Rule{
		Alert:  AlertBurn,
		Expr:   strings.Join(conds, "\nor\n"),
		Labels: map[string]string{"severity": severity, "content_class": class},
		Annotations: map[string]string{
			"summary": fmt.Sprintf("%s reviews are spending their error budget too fast (%s)", class, strings.Join(what, ", or ")),
			"description": fmt.Sprintf("{{ $value | humanizePercentage }} of %s reviews are missing their budget (no complete finding within it), against an objective of %s (an error budget of %s).",
				class, number(objective), number(budget)),
		},
	}
}

// number formats f in the fewest digits that give it back, after rounding
// away the binary noise of arithmetic such as 14.4 × (1 - 0.99).
func number(f float64) string {
	if f != 0 {
		digits := 12 - int(math.Ceil(math.Log10(math.Abs(f))))
		scale := math.Pow(10, float64(digits))
		f = math.Round(f*scale) / scale
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// promDuration formats d as a Prometheus duration.
func promDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return fmt.Sprintf("%dms", d/time.Millisecond)
}

// Write writes f as YAML, after a comment saying where it came from.
func Write(w io.Writer, f File, source string) error {
	if _, err := fmt.Fprintf(w, "# Prometheus rules generated by `reviewledger alerts` from %s.\n# Load them with rule_files; regenerate after changing the policy.\n", source); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(f); err != nil {
		return err
	}
	return enc.Close()
}
