package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/projections/alert"
)

// AlertsCmd prints the Prometheus rules watching the policy's service
// levels (package alert): error-ratio recording rules, multi-window
// multi-burn-rate alerts per class, manual-queue age against each class's
// queue SLA, retry-budget exhaustion, providers and shadow providers
// failing most of their calls, and missing SLIs.
type AlertsCmd struct {
	PolicyFile string        `name:"policy" env:"REVIEWLEDGER_POLICY" help:"Policy file (YAML); the built-in default policy when unset."`
	Selector   string        `name:"selector" help:"Label matchers added to every metric selector, such as job=\"reviewledger\"."`
	Output     string        `name:"output" short:"o" help:"Write the rules to this file instead of standard output."`
	QueueFor   time.Duration `name:"queue-for" default:"5m" help:"How long the oldest manual-queue review must be past its class's queue_sla before alerting."`

	ProviderFailing    float64       `name:"provider-failing" default:"0.5" help:"Share of a provider's calls over 5m that must fail (above 0, below 1) for ProviderFailing, or of a shadow provider's for ShadowProviderFailing."`
	ProviderFailingFor time.Duration `name:"provider-failing-for" default:"10m" help:"How long that share must hold before alerting."`

	policy domain.Policy
}

// Validate loads the policy and checks the selector, naming the setting.
func (c *AlertsCmd) Validate() error {
	c.policy = domain.DefaultPolicy()
	if c.PolicyFile != "" {
		p, err := loadPolicy(c.PolicyFile)
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_POLICY: %w", err)
		}
		c.policy = p
	}
	if c.QueueFor <= 0 {
		return fmt.Errorf("--queue-for: must be a positive duration, got %s", c.QueueFor)
	}
	if c.ProviderFailing <= 0 || c.ProviderFailing >= 1 {
		return fmt.Errorf("--provider-failing: must be a share above 0 and below 1, got %v", c.ProviderFailing)
	}
	if c.ProviderFailingFor <= 0 {
		return fmt.Errorf("--provider-failing-for: must be a positive duration, got %s", c.ProviderFailingFor)
	}
	if err := c.options().Validate(); err != nil {
		return fmt.Errorf("--%w", err)
	}
	return nil
}

func (c *AlertsCmd) options() alert.Options {
	return alert.Options{Selector: c.Selector, QueueFor: c.QueueFor, ProviderFailing: c.ProviderFailing, ProviderFailingFor: c.ProviderFailingFor}
}

// Run writes the rules.
func (c *AlertsCmd) Run(out io.Writer) error {
	rules, err := alert.Rules(c.policy, c.options())
	if err != nil {
		return err
	}
	source := "the built-in default policy"
	if c.PolicyFile != "" {
		source = c.PolicyFile
	}
	var buf bytes.Buffer
	if err := alert.Write(&buf, rules, source); err != nil {
		return err
	}
	if c.Output == "" {
		_, err := out.Write(buf.Bytes())
		return err
	}
	return os.WriteFile(c.Output, buf.Bytes(), 0o644)
}
