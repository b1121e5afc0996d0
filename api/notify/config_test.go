package notify

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	short := "whsec_" + base64.StdEncoding.EncodeToString([]byte("too-short"))
	for _, tc := range []struct {
		name    string
		mod     func(*Config)
		setting string
	}{
		{"no URL", func(c *Config) { c.URL = "" }, "REVIEWLEDGER_NOTIFY_URL"},
		{"not http", func(c *Config) { c.URL = "ftp://example.test/x" }, "REVIEWLEDGER_NOTIFY_URL"},
		{"no host", func(c *Config) { c.URL = "http:///x" }, "REVIEWLEDGER_NOTIFY_URL"},
		{"no secret", func(c *Config) { c.Secret = "" }, "REVIEWLEDGER_NOTIFY_SECRET"},
		{"no prefix", func(c *Config) { c.Secret = strings.TrimPrefix(testSecret, "whsec_") }, "REVIEWLEDGER_NOTIFY_SECRET"},
		{"not base64", func(c *Config) { c.Secret = "whsec_not*base64" }, "REVIEWLEDGER_NOTIFY_SECRET"},
		{"short key", func(c *Config) { c.Secret = short }, "REVIEWLEDGER_NOTIFY_SECRET"},
		{"concurrency", func(c *Config) { c.Concurrency = MaxConcurrency + 1 }, "REVIEWLEDGER_NOTIFY_CONCURRENCY"},
		{"timeout", func(c *Config) { c.Timeout = -time.Second }, "REVIEWLEDGER_NOTIFY_TIMEOUT"},
		{"retry window", func(c *Config) { c.RetryFor = -time.Second }, "REVIEWLEDGER_NOTIFY_RETRY_FOR"},
		{"backoff max below initial", func(c *Config) { c.BackoffInitial, c.BackoffMax = time.Minute, time.Second }, "REVIEWLEDGER_NOTIFY_BACKOFF_MAX"},
		{"from", func(c *Config) { c.From = "yesterday" }, "REVIEWLEDGER_NOTIFY_FROM"},
		{"keep", func(c *Config) { c.Keep = -time.Hour }, "REVIEWLEDGER_NOTIFY_KEEP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{URL: "https://platform.test/hooks", Secret: testSecret}
			tc.mod(&c)
			c.setDefaults()
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.HasPrefix(err.Error(), tc.setting+": ") {
				t.Fatalf("Validate: %v, want an error naming %s", err, tc.setting)
			}
			if strings.Contains(err.Error(), strings.TrimPrefix(testSecret, "whsec_")) {
				t.Errorf("the error quotes the secret: %v", err)
			}
		})
	}
	c := Config{URL: "https://platform.test/hooks", Secret: testSecret}
	c.setDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := New(c); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("New without Pool, Store and Histories: %v", err)
	}
}
