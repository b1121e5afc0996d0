package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/reviewledger/reviewledger/domain"
)

// policyFile is what a policy file holds: the classes, and the providers
// they may name beside the default one.
type policyFile struct {
	Policy    domain.Policy
	Providers map[string]providerSpec
}

// loadPolicy reads a policy file's classes (loadPolicyFile).
func loadPolicy(path string) (domain.Policy, error) {
	f, err := loadPolicyFile(path)
	return f.Policy, err
}

// loadPolicyFile reads a policy file (docs/contracts.md §3). Unknown keys,
// malformed values, policies domain.ClassPolicy.Validate refuses and
// classes naming providers the file does not declare are errors naming the
// file, the class or provider, and the key.
func loadPolicyFile(path string) (policyFile, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return policyFile{}, err
	}
	f, err := parsePolicyFile(raw)
	if err != nil {
		return policyFile{}, fmt.Errorf("%s: %w", path, err)
	}
	return f, nil
}

func parsePolicy(raw []byte) (domain.Policy, error) {
	f, err := parsePolicyFile(raw)
	return f.Policy, err
}

func parsePolicyFile(raw []byte) (policyFile, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return policyFile{}, err
	}
	if len(doc.Content) == 0 {
		return policyFile{}, errors.New("empty policy file")
	}
	p := domain.Policy{Classes: map[string]domain.ClassPolicy{}}
	var specs map[string]providerSpec
	err := eachKey(doc.Content[0], "", func(key string, v *yaml.Node) error {
		if key == "providers" {
			var err error
			specs, err = parseProviders(v)
			return err
		}
		if key != "classes" {
			return fmt.Errorf("line %d: unknown key %q", v.Line, key)
		}
		return eachKey(v, "classes", func(class string, v *yaml.Node) error {
			c, err := parseClass(v)
			if err != nil {
				return fmt.Errorf("class %q: %w", class, err)
			}
			p.Classes[class] = c
			return nil
		})
	})
	if err != nil {
		return policyFile{}, err
	}
	if err := p.Validate(); err != nil {
		return policyFile{}, err
	}
	if err := checkRoutes(p, specs); err != nil {
		return policyFile{}, err
	}
	return policyFile{Policy: p, Providers: specs}, nil
}

func parseClass(n *yaml.Node) (domain.ClassPolicy, error) {
	var c domain.ClassPolicy
	primary := false
	err := eachKey(n, "class", func(key string, v *yaml.Node) error {
		var err error
		switch key {
		case "budget":
			c.Budget, err = duration(v)
		case "attempt_timeout":
			c.AttemptTimeout, err = duration(v)
		case "max_attempts":
			c.MaxAttempts, err = integer(v)
		case "on_exhaustion":
			c.OnExhaustion = domain.Exhaustion(v.Value)
			if v.Kind != yaml.ScalarNode {
				err = fmt.Errorf("line %d: want manual_review or rejected", v.Line)
			}
		case "human_gate":
			c.HumanGate, err = boolean(v)
		case "priority":
			c.Priority, err = integer(v)
		case "approvals":
			c.Approvals, err = integer(v)
		case "objective":
			c.Objective, err = fraction(v)
		case "queue_sla":
			// Written, it must be positive like every duration of the file.
			if c.QueueSLA, err = duration(v); err == nil && c.QueueSLA <= 0 {
				err = fmt.Errorf("line %d: must be a positive duration, got %s", v.Line, c.QueueSLA)
			}
		case "manual_sla":
			if c.ManualSLA, err = duration(v); err == nil && c.ManualSLA <= 0 {
				err = fmt.Errorf("line %d: must be a positive duration, got %s", v.Line, c.ManualSLA)
			}
		case "provider":
			var route []string
			if route, err = names(v); err == nil && len(route) != 1 {
				err = fmt.Errorf("line %d: want one provider name (the primary; list the others under fallbacks)", v.Line)
			}
			c.Providers, primary = append(route, c.Providers...), true
		case "fallbacks":
			var fallbacks []string
			if fallbacks, err = names(v); err == nil {
				c.Providers = append(c.Providers, fallbacks...)
			}
		case "shadows":
			c.Shadows, err = names(v)
		case "claims":
			c.Claims = domain.ClaimMode(v.Value)
			if v.Kind != yaml.ScalarNode {
				err = fmt.Errorf("line %d: want optional or required", v.Line)
			}
		case "backoff":
			return eachKey(v, "backoff", func(key string, v *yaml.Node) error {
				var err error
				switch key {
				case "initial":
					c.Backoff.Initial, err = duration(v)
				case "max":
					c.Backoff.Max, err = duration(v)
				case "jitter":
					// Every duration written in the file must be positive
					// (docs/contracts.md §3); leave jitter out for none.
					if c.Backoff.Jitter, err = duration(v); err == nil && c.Backoff.Jitter <= 0 {
						err = fmt.Errorf("line %d: must be a positive duration, got %s (leave jitter out for none)", v.Line, c.Backoff.Jitter)
					}
				default:
					return fmt.Errorf("backoff.%s: line %d: unknown key", key, v.Line)
				}
				if err != nil {
					return fmt.Errorf("backoff.%s: %w", key, err)
				}
				return nil
			})
		default:
			return fmt.Errorf("%s: line %d: unknown key", key, v.Line)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", key, err)
		}
		return nil
	})
	if len(c.Providers) > 0 && !primary {
		c.Providers = append([]string{domain.DefaultProvider}, c.Providers...) // fallbacks of the default provider
	}
	return c, err
}

// eachKey calls fn for every key of the mapping n, in order, refusing
// anything that is not a mapping and keys given twice.
func eachKey(n *yaml.Node, what string, fn func(key string, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s must be a mapping", n.Line, orDocument(what))
	}
	seen := make(map[string]bool)
	for i := 0; i+1 < len(n.Content); i += 2 {
		key := n.Content[i].Value
		if seen[key] {
			return fmt.Errorf("%s: line %d: key given twice", key, n.Content[i].Line)
		}
		seen[key] = true
		if err := fn(key, n.Content[i+1]); err != nil {
			return err
		}
	}
	return nil
}

func orDocument(what string) string {
	if what == "" {
		return "the document"
	}
	return what
}

func duration(v *yaml.Node) (time.Duration, error) {
	d, err := time.ParseDuration(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: want a duration such as 250ms or 30s, got %q", v.Line, v.Value)
	}
	return d, nil
}

func integer(v *yaml.Node) (int, error) {
	n, err := strconv.Atoi(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: want an integer, got %q", v.Line, v.Value)
	}
	return n, nil
}

// fraction reads an objective: a number above 0 and below 1.
func fraction(v *yaml.Node) (float64, error) {
	f, err := strconv.ParseFloat(v.Value, 64)
	if v.Kind != yaml.ScalarNode || err != nil || !(f > 0 && f < 1) {
		return 0, fmt.Errorf("line %d: want a number above 0 and below 1 such as 0.99, got %q", v.Line, v.Value)
	}
	return f, nil
}

func boolean(v *yaml.Node) (bool, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Value == "true":
		return true, nil
	case v.Kind == yaml.ScalarNode && v.Value == "false":
		return false, nil
	}
	return false, fmt.Errorf("line %d: want true or false, got %q", v.Line, v.Value)
}
