package main

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/reviewledger/reviewledger/api/httpapi"
	"github.com/reviewledger/reviewledger/domain"
)

// Config is the operator configuration of docs/contracts.md §1. Every setting is an
// environment variable with a mirroring flag; values are kept as given and
// checked by Validate, whose errors name the environment variable.
type Config struct {
	DatabaseURL    string `name:"database-url" env:"DATABASE_URL" default:"postgres://postgres@localhost:5432/reviewledger?sslmode=disable" help:"PostgreSQL connection string."`
	SessionURL     string `name:"session-database-url" env:"REVIEWLEDGER_SESSION_DATABASE_URL" help:"The PostgreSQL server itself, for what needs a session of its own (advisory-lock elections, LISTEN, the migration and audit signing locks), when DATABASE_URL goes through a transaction pooler such as PgBouncer; DATABASE_URL when unset. Setting it apart from DATABASE_URL makes DATABASE_URL's default_query_exec_mode cache_describe."`
	ReadURL        string `name:"read-database-url" env:"REVIEWLEDGER_READ_DATABASE_URL" help:"A streaming replica of DATABASE_URL's database (optional): the read models' queries (manual queue list, SLO, series) and audit verify read it, falling back to the primary while it is down or lags; everything else stays on the primary."`
	Addr           string `name:"addr" env:"REVIEWLEDGER_ADDR" default:":8080" help:"Address the HTTP server listens on."`
	PolicyFile     string `name:"policy" env:"REVIEWLEDGER_POLICY" help:"Policy file (YAML); the built-in default policy when unset."`
	Provider       string `name:"provider" env:"REVIEWLEDGER_PROVIDER" default:"sim" help:"Moderation provider: sim (built-in simulator) or http."`
	ProviderURL    string `name:"provider-url" env:"REVIEWLEDGER_PROVIDER_URL" help:"The provider's URL, for --provider=http."`
	TokenList      string `name:"tokens" env:"REVIEWLEDGER_TOKENS" help:"Bearer tokens: comma-separated role:name:token (roles submitter, moderator, auditor, admin; tokens of 16 characters or more)."`
	CallbackSecret string `name:"callback-secret" env:"REVIEWLEDGER_CALLBACK_SECRET" help:"Standard Webhooks secret (whsec_ + base64) signing provider callbacks."`
	MaxBody        string `name:"max-body-bytes" env:"REVIEWLEDGER_MAX_BODY_BYTES" default:"4MiB" help:"Largest request body accepted: bytes, or with a KiB/MiB suffix."`
	Sweep          string `name:"sweep-interval" env:"REVIEWLEDGER_SWEEP_INTERVAL" default:"5s" help:"How often the deadline sweeper runs."`

	// Filled by Validate.
	Tokens []httpapi.Token `kong:"-"`
	Policy domain.Policy   `kong:"-"`
	// Providers are the policy file's named providers (none without one).
	Providers     map[string]providerSpec `kong:"-"`
	MaxBodyBytes  int64                   `kong:"-"`
	SweepInterval time.Duration           `kong:"-"`
}

// Validate checks every setting and fills the parsed fields (Tokens, Policy,
// MaxBodyBytes, SweepInterval). The error names the first setting at fault.
func (c *Config) Validate() error {
	if _, err := pgxpool.ParseConfig(c.DatabaseURL); err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	if _, err := pgxpool.ParseConfig(c.SessionURL); c.SessionURL != "" && err != nil {
		return fmt.Errorf("REVIEWLEDGER_SESSION_DATABASE_URL: %w", err)
	}
	if _, err := pgxpool.ParseConfig(c.ReadURL); c.ReadURL != "" && err != nil {
		return fmt.Errorf("REVIEWLEDGER_READ_DATABASE_URL: %w", err)
	}
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("REVIEWLEDGER_ADDR: %q is not host:port: %w", c.Addr, err)
	}
	switch c.Provider {
	case "sim":
	case "http":
		u, err := url.Parse(c.ProviderURL)
		if c.ProviderURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("REVIEWLEDGER_PROVIDER_URL: REVIEWLEDGER_PROVIDER=http needs an http(s) URL, got %q", c.ProviderURL)
		}
	default:
		return fmt.Errorf("REVIEWLEDGER_PROVIDER: must be sim or http, got %q", c.Provider)
	}
	if err := c.validateSecret(); err != nil {
		return err
	}
	tokens, err := parseTokens(c.TokenList)
	if err != nil {
		return err
	}
	n, err := parseBytes(c.MaxBody)
	if err != nil {
		return fmt.Errorf("REVIEWLEDGER_MAX_BODY_BYTES: %w", err)
	}
	sweep, err := time.ParseDuration(c.Sweep)
	if err != nil || sweep <= 0 {
		return fmt.Errorf("REVIEWLEDGER_SWEEP_INTERVAL: must be a positive duration such as 5s, got %q", c.Sweep)
	}
	file := policyFile{Policy: domain.DefaultPolicy()}
	if c.PolicyFile != "" {
		if file, err = loadPolicyFile(c.PolicyFile); err != nil {
			return fmt.Errorf("REVIEWLEDGER_POLICY: %w", err)
		}
	}
	c.Tokens, c.MaxBodyBytes, c.SweepInterval, c.Policy, c.Providers = tokens, n, sweep, file.Policy, file.Providers
	return nil
}

// validateSecret checks REVIEWLEDGER_CALLBACK_SECRET: whsec_ and base64 of
// at least 16 bytes. It is required with the http provider, whose findings
// may come by callback.
func (c *Config) validateSecret() error {
	const setting = "REVIEWLEDGER_CALLBACK_SECRET"
	if c.CallbackSecret == "" {
		if c.Provider == "http" {
			return fmt.Errorf("%s: required with REVIEWLEDGER_PROVIDER=http", setting)
		}
		return nil
	}
	b64, ok := strings.CutPrefix(c.CallbackSecret, "whsec_")
	if !ok {
		return fmt.Errorf("%s: must start with whsec_", setting)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return fmt.Errorf("%s: the part after whsec_ is not base64", setting)
	}
	if len(key) < 16 {
		return fmt.Errorf("%s: key is %d bytes, want at least 16", setting, len(key))
	}
	return nil
}

// parseTokens parses REVIEWLEDGER_TOKENS with the API's rules and refuses a
// name used twice.
func parseTokens(list string) ([]httpapi.Token, error) {
	tokens, err := httpapi.ParseTokens(list)
	if err != nil {
		return nil, err
	}
	seen := make(map[string]bool, len(tokens))
	for _, t := range tokens {
		if seen[t.Name] {
			return nil, fmt.Errorf("REVIEWLEDGER_TOKENS: name %q is used twice", t.Name)
		}
		seen[t.Name] = true
	}
	return tokens, nil
}

// parseBytes parses a positive size: digits, optionally followed by KiB,
// MiB or GiB.
func parseBytes(s string) (int64, error) {
	num, unit := s, int64(1)
	for suffix, mult := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(s, suffix); ok {
			num, unit = n, mult
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 64)
	if err != nil || n <= 0 || n > (1<<40)/unit {
		return 0, fmt.Errorf("must be a positive size in bytes, optionally with a KiB, MiB or GiB suffix, got %q", s)
	}
	return n * unit, nil
}
