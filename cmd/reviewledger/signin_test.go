package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSignInConfigNamesTheSetting(t *testing.T) {
	dir := t.TempDir()
	badFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(badFile, []byte("# tokens\nmoderator:bob:short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const issuer = "https://idp.example/realms/staff"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"token file missing", map[string]string{"REVIEWLEDGER_TOKENS_FILE": filepath.Join(dir, "none")}, "REVIEWLEDGER_TOKENS_FILE: open"},
		{"token file entry", map[string]string{"REVIEWLEDGER_TOKENS_FILE": badFile}, `REVIEWLEDGER_TOKENS_FILE: entry 1 ("bob"): token is shorter than 16 characters`},
		{"client without issuer", map[string]string{"REVIEWLEDGER_OIDC_CLIENT_ID": "rl"}, "REVIEWLEDGER_OIDC_CLIENT_ID: set without REVIEWLEDGER_OIDC_ISSUER"},
		{"issuer not a URL", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": "idp.example", "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops"}, "REVIEWLEDGER_OIDC_ISSUER: \"idp.example\" is not an http(s) URL"},
		{"no audience", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops"}, "REVIEWLEDGER_OIDC_AUDIENCE: required"},
		{"no role map", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl"}, "REVIEWLEDGER_OIDC_ROLE_MAP: required"},
		{"unknown role", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "boss=ops"}, `REVIEWLEDGER_OIDC_ROLE_MAP: entry 1: role "boss"`},
		{"no redirect", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops"}, "REVIEWLEDGER_OIDC_REDIRECT_URL: required"},
		{"http redirect", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops", "REVIEWLEDGER_OIDC_REDIRECT_URL": "http://reviews.example/auth/callback"}, "REVIEWLEDGER_OIDC_REDIRECT_URL: must be https"},
		{"redirect path", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops", "REVIEWLEDGER_OIDC_REDIRECT_URL": "https://reviews.example/callback"}, "REVIEWLEDGER_OIDC_REDIRECT_URL: the path must be /auth/callback"},
		{"leeway", map[string]string{"REVIEWLEDGER_OIDC_ISSUER": issuer, "REVIEWLEDGER_OIDC_CLIENT_ID": "rl", "REVIEWLEDGER_OIDC_ROLE_MAP": "admin=ops", "REVIEWLEDGER_OIDC_REDIRECT_URL": "https://reviews.example/auth/callback", "REVIEWLEDGER_OIDC_LEEWAY": "1h"}, "REVIEWLEDGER_OIDC_LEEWAY: must be between 0 and 5m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			code, _, stderr := runCLI(t, context.Background(), "serve")
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
				t.Fatalf("exit %d, stderr %q; want 2 and one line containing %q", code, stderr, tc.want)
			}
		})
	}
}
