package main

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// providerSpec is one entry of the policy file's providers section
// (docs/contracts.md, "Providers").
type providerSpec struct {
	Kind   string // http or sim
	URL    string // http
	Secret string // its callbacks' Standard Webhooks secret; empty: REVIEWLEDGER_CALLBACK_SECRET's
	// Upstream carries its timeout, concurrency, retry budget and circuit.
	Upstream engine.Upstream
	Sim      provider.SimConfig // sim
}

// parseProviders reads the providers section: a mapping of names to
// settings. Errors name the provider and the key.
func parseProviders(n *yaml.Node) (map[string]providerSpec, error) {
	specs := map[string]providerSpec{}
	err := eachKey(n, "providers", func(name string, v *yaml.Node) error {
		if !domain.ValidProviderName(name) {
			return fmt.Errorf("provider %q: line %d: not a provider name (1 to %d of a-z, 0-9, _ and -, starting with a letter)", name, v.Line, domain.MaxProviderNameLen)
		}
		if name == domain.DefaultProvider {
			return fmt.Errorf("provider %q: line %d: the name is the single-provider settings' (REVIEWLEDGER_PROVIDER and its companions); give this provider another", name, v.Line)
		}
		s, err := parseProvider(v)
		if err != nil {
			return fmt.Errorf("provider %q: %w", name, err)
		}
		specs[name] = s
		return nil
	})
	return specs, err
}

func parseProvider(n *yaml.Node) (providerSpec, error) {
	var s providerSpec
	var secretEnv string
	err := eachKey(n, "provider", func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "kind":
			s.Kind = v.Value
			if v.Kind != yaml.ScalarNode || (s.Kind != "http" && s.Kind != "sim") {
				err = fmt.Errorf("line %d: want http or sim, got %q", v.Line, v.Value)
			}
		case "url":
			s.URL = v.Value
			u, perr := url.Parse(v.Value)
			if v.Kind != yaml.ScalarNode || perr != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				err = fmt.Errorf("line %d: want an absolute http(s) URL, got %q", v.Line, v.Value)
			}
		case "callback_secret":
			s.Secret, err = scalar(v)
		case "callback_secret_env":
			if secretEnv, err = scalar(v); err == nil {
				if s.Secret = os.Getenv(secretEnv); s.Secret == "" {
					err = fmt.Errorf("line %d: the environment variable %s is not set", v.Line, secretEnv)
				}
			}
		case "timeout":
			s.Upstream.Timeout, err = positive(v)
		case "concurrency":
			s.Upstream.Concurrency, err = atLeastOne(v)
		case "retry_budget":
			return parseRetryBudget(v, &s.Upstream)
		case "circuit":
			return parseCircuit(v, &s.Upstream.Circuit)
		case "sim":
			if err := parseSim(v, &s.Sim); err != nil {
				return err
			}
			return checkSim(v.Line, s.Sim)
		default:
			return fmt.Errorf("%s: line %d: unknown key", key, v.Line)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	return s, s.check(n.Line, secretEnv)
}

// check refuses what the keys allow one by one but not together.
func (s providerSpec) check(line int, secretEnv string) error {
	switch {
	case s.Kind == "":
		return fmt.Errorf("kind: line %d: required (http or sim)", line)
	case s.Kind == "http" && s.URL == "":
		return fmt.Errorf("url: line %d: required with kind: http", line)
	case s.Kind == "sim" && s.URL != "":
		return fmt.Errorf("url: line %d: a sim provider has none", line)
	case s.Kind == "http" && s.Secret == "" && secretEnv == "":
		return fmt.Errorf("callback_secret_env: line %d: required with kind: http (the secret its callbacks are signed with)", line)
	}
	if s.Secret != "" {
		if err := checkSecret(s.Secret); err != nil {
			key := "callback_secret"
			if secretEnv != "" {
				key = "callback_secret_env"
			}
			return fmt.Errorf("%s: %w", key, err)
		}
	}
	return nil
}

// checkSecret checks a Standard Webhooks secret: whsec_ and base64 of at
// least 16 bytes.
func checkSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	if !ok {
		return fmt.Errorf("must start with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("the part after whsec_ is not base64")
	}
	if len(key) < 16 {
		return fmt.Errorf("key is %d bytes, want at least 16", len(key))
	}
	return nil
}

func parseRetryBudget(n *yaml.Node, u *engine.Upstream) error {
	return eachKey(n, "retry_budget", func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "ratio":
			u.RetryBudget, err = ratio(v)
		case "window":
			u.RetryBudgetWindow, err = positive(v)
		case "min_retries":
			u.RetryBudgetMinRetries, err = atLeastOne(v)
		default:
			return fmt.Errorf("retry_budget.%s: line %d: unknown key", key, v.Line)
		}
		if err != nil {
			return fmt.Errorf("retry_budget.%s: %w", key, err)
		}
		return nil
	})
}

func parseCircuit(n *yaml.Node, c *engine.Circuit) error {
	return eachKey(n, "circuit", func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "failure_ratio":
			c.FailureRatio, err = ratio(v)
		case "window":
			if c.Window, err = positive(v); err == nil && c.Window < minCircuitWindow {
				err = fmt.Errorf("line %d: must be at least %s, got %s", v.Line, minCircuitWindow, c.Window)
			}
		case "min_calls":
			c.MinCalls, err = atLeastOne(v)
		case "open_for":
			c.OpenFor, err = positive(v)
		case "probes":
			c.Probes, err = atLeastOne(v)
		default:
			return fmt.Errorf("circuit.%s: line %d: unknown key", key, v.Line)
		}
		if err != nil {
			return fmt.Errorf("circuit.%s: %w", key, err)
		}
		return nil
	})
}

func parseSim(n *yaml.Node, c *provider.SimConfig) error {
	return eachKey(n, "sim", func(key string, v *yaml.Node) error {
		var err error
		rates := map[string]*float64{"timeout_rate": &c.TimeoutRate, "error_rate": &c.ErrorRate, "invalid_rate": &c.InvalidRate,
			"async_rate": &c.AsyncRate, "late_callback_rate": &c.LateCallbackRate, "reject_rate": &c.RejectRate}
		switch key {
		case "seed":
			var n int
			n, err = integer(v)
			c.Seed = uint64(max(n, 0))
		case "median":
			c.MedianLatency, err = positive(v)
		case "p99":
			c.P99Latency, err = positive(v)
		default:
			r, ok := rates[key]
			if !ok {
				return fmt.Errorf("sim.%s: line %d: unknown key", key, v.Line)
			}
			*r, err = rate(v)
		}
		if err != nil {
			return fmt.Errorf("sim.%s: %w", key, err)
		}
		return nil
	})
}

// minCircuitWindow is the shortest circuit window the engine counts in.
const minCircuitWindow = 10 * time.Millisecond

// checkSim refuses a simulator's settings that are valid one by one but
// not together; line is the sim key's.
func checkSim(line int, c provider.SimConfig) error {
	if sum := c.TimeoutRate + c.ErrorRate + c.InvalidRate + c.AsyncRate; sum > 1 {
		return fmt.Errorf("sim: line %d: timeout_rate + error_rate + invalid_rate + async_rate must not exceed 1, got %v", line, sum)
	}
	if c.P99Latency > 0 && c.MedianLatency > 0 && c.P99Latency < c.MedianLatency {
		return fmt.Errorf("sim.p99: line %d: %s is below sim.median %s", line, c.P99Latency, c.MedianLatency)
	}
	return nil
}

func scalar(v *yaml.Node) (string, error) {
	if v.Kind != yaml.ScalarNode || v.Value == "" {
		return "", fmt.Errorf("line %d: want a string", v.Line)
	}
	return v.Value, nil
}

func atLeastOne(v *yaml.Node) (int, error) {
	n, err := integer(v)
	if err == nil && n < 1 {
		err = fmt.Errorf("line %d: must be at least 1, got %d", v.Line, n)
	}
	return n, err
}

// ratio reads a share above 0 and at most 1.
func ratio(v *yaml.Node) (float64, error) {
	f, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || !(f > 0 && f <= 1) {
		return 0, fmt.Errorf("line %d: want a number above 0 and at most 1 such as 0.5, got %q", v.Line, v.Value)
	}
	return f, nil
}

// rate reads a simulator's rate, from 0 to 1.
func rate(v *yaml.Node) (float64, error) {
	f, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("line %d: want a number from 0 to 1, got %q", v.Line, v.Value)
	}
	return f, nil
}

// names reads a provider name or a list of them.
func names(v *yaml.Node) ([]string, error) {
	if v.Kind == yaml.ScalarNode {
		return []string{v.Value}, nil
	}
	if v.Kind != yaml.SequenceNode {
		return nil, fmt.Errorf("line %d: want a provider name or a list of them", v.Line)
	}
	out := make([]string, 0, len(v.Content))
	for _, item := range v.Content {
		if item.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: want a provider name", item.Line)
		}
		out = append(out, item.Value)
	}
	return out, nil
}

// positive reads a positive duration.
func positive(v *yaml.Node) (time.Duration, error) {
	d, err := duration(v)
	if err == nil && d <= 0 {
		err = fmt.Errorf("line %d: must be a positive duration, got %s", v.Line, d)
	}
	return d, err
}

// checkRoutes refuses a class naming a provider the file does not declare
// (the default one, from the single-provider settings, always exists).
func checkRoutes(p domain.Policy, specs map[string]providerSpec) error {
	for _, class := range p.Names() {
		c := p.Classes[class]
		keys := map[string][]string{"provider": c.Route()[:1], "fallbacks": c.Route()[1:], "shadows": c.Shadows}
		for _, key := range []string{"provider", "fallbacks", "shadows"} {
			for _, name := range keys[key] {
				if _, ok := specs[name]; !ok && name != domain.DefaultProvider {
					return fmt.Errorf("class %q: %s: no provider named %q in providers (declared: %s)", class, key, name, declared(specs))
				}
			}
		}
	}
	return nil
}

func declared(specs map[string]providerSpec) string {
	names := []string{domain.DefaultProvider}
	for name := range specs {
		names = append(names, name)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}
