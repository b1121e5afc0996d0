package esdbstore

import (
	"errors"
	"strings"
	"testing"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
)

func TestNormalizeURL(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"esdb://localhost:2113?tls=false", "esdb://localhost:2113?tls=false"},
		{"esdb+discover://cluster.example:2113", "esdb+discover://cluster.example:2113"},
		{"kurrentdb://localhost:2113?tls=false", "esdb://localhost:2113?tls=false"},
		{"KurrentDB://localhost:2113", "esdb://localhost:2113"},
		{"kurrentdb+discover://admin:changeit@cluster.example:2113?nodePreference=leader", "esdb+discover://admin:changeit@cluster.example:2113?nodePreference=leader"},
		{"kurrent://a:2113,b:2113,c:2113?tls=false&tlsVerifyCert=false", "esdb://a:2113,b:2113,c:2113?tls=false&tlsVerifyCert=false"},
	}
	for _, tc := range tests {
		got, err := normalizeURL(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("normalizeURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		// What comes out is what the client parses.
		if _, err := esdb.ParseConnectionString(got); err != nil {
			t.Errorf("client refuses %q: %v", got, err)
		}
	}
}

func TestNormalizeURLRefuses(t *testing.T) {
	tests := []struct {
		in, mention string
	}{
		{"localhost:2113", "no scheme"},
		{"http://localhost:2113", `scheme "http"`},
		{"postgres://localhost:5432/db", `scheme "postgres"`},
		{"esdb://localhost:2113?tsl=false", `unknown setting "tsl"`},
		{"esdb://localhost:2113?tls=false&%zz", "settings"},
	}
	for _, tc := range tests {
		_, err := normalizeURL(tc.in)
		if !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), tc.mention) || !strings.Contains(err.Error(), "URL") {
			t.Errorf("normalizeURL(%q) = %v; want ErrInvalidURL naming the URL and %q", tc.in, err, tc.mention)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	var c Config
	c.setDefaults()
	if err := c.Validate(); !errors.Is(err, ErrInvalidURL) || !strings.Contains(err.Error(), "URL") {
		t.Fatalf("empty URL: %v, want ErrInvalidURL naming URL", err)
	}
	if c.ReadBatch != 256 || c.Logger == nil {
		t.Fatalf("defaults: %+v", c)
	}
	c.URL = "esdb://localhost:2113?tls=false"
	if err := c.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
}

func TestScrub(t *testing.T) {
	raw := "esdb://admin:s3cret-pw@localhost:2113?tls=false"
	if got := password(raw); got != "s3cret-pw" {
		t.Fatalf("password = %q", got)
	}
	msg := scrub(`parse "esdb://admin:s3cret-pw@localhost:2113": bad`, raw)
	if strings.Contains(msg, "s3cret-pw") || !strings.Contains(msg, "admin:xxxxx@") {
		t.Fatalf("scrub left %q", msg)
	}
	if got := password("esdb://localhost:2113"); got != "" {
		t.Fatalf("password without credentials = %q", got)
	}
	if got := password("esdb://admin@localhost:2113"); got != "" {
		t.Fatalf("password of a bare user = %q", got)
	}
}
