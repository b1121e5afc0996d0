package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// validEnv is a configuration that passes Validate.
var validEnv = map[string]string{
	"DATABASE_URL":                 "postgres://postgres@127.0.0.1:5432/reviewledger?sslmode=disable",
	"REVIEWLEDGER_ADDR":            "127.0.0.1:0",
	"REVIEWLEDGER_POLICY":          "",
	"REVIEWLEDGER_PROVIDER":        "sim",
	"REVIEWLEDGER_PROVIDER_URL":    "",
	"REVIEWLEDGER_TOKENS":          "submitter:alice:alice-token-0123456789,moderator:bob:bob-token-0123456789",
	"REVIEWLEDGER_CALLBACK_SECRET": "",
	"REVIEWLEDGER_MAX_BODY_BYTES":  "",
	"REVIEWLEDGER_SWEEP_INTERVAL":  "",
	"REVIEWLEDGER_EVENTSTORE":      "",
	"REVIEWLEDGER_EVENTSTORE_URL":  "",

	"REVIEWLEDGER_AUDIT_SIGNING_KEY":         "",
	"REVIEWLEDGER_AUDIT_CHECKPOINT_INTERVAL": "",
	"REVIEWLEDGER_AUDIT_WITNESS_DIR":         "",

	"REVIEWLEDGER_DB_MAX_CONNS":         "",
	"REVIEWLEDGER_SESSION_DATABASE_URL": "",
	"REVIEWLEDGER_READ_DATABASE_URL":    "",
	"REVIEWLEDGER_ROLES":                "",
	"REVIEWLEDGER_WORKER_SWEEPS":        "",
	"REVIEWLEDGER_NOTIFY_URL":           "",
	"REVIEWLEDGER_NOTIFY_SECRET":        "",
	"REVIEWLEDGER_PUBSUB":               "",

	"REVIEWLEDGER_TOKENS_FILE":           "",
	"REVIEWLEDGER_OIDC_ISSUER":           "",
	"REVIEWLEDGER_OIDC_CLIENT_ID":        "",
	"REVIEWLEDGER_OIDC_CLIENT_SECRET":    "",
	"REVIEWLEDGER_OIDC_AUDIENCE":         "",
	"REVIEWLEDGER_OIDC_ROLE_MAP":         "",
	"REVIEWLEDGER_OIDC_LEEWAY":           "",
	"REVIEWLEDGER_OIDC_REDIRECT_URL":     "",
	"REVIEWLEDGER_OIDC_SCOPES":           "",
	"REVIEWLEDGER_OIDC_REFRESH_INTERVAL": "",
	"REVIEWLEDGER_OIDC_SESSION_MAX_AGE":  "",
}

// setEnv sets the environment of a CLI run: validEnv with overrides, which
// may name only variables of validEnv (so that the developer's own
// settings never leak into a test).

func setEnv(t *testing.T, overrides map[string]string) {
	for k := range overrides {
		if _, ok := validEnv[k]; !ok {
			t.Fatalf("setEnv: %s is not in validEnv", k)
		}
	}
	for k, v := range validEnv {
		if o, ok := overrides[k]; ok {
			v = o
		}
		if v == "" {
			t.Setenv(k, "")
			os.Unsetenv(k)
			continue
		}
		t.Setenv(k, v)
	}
}

func runCLI(t *testing.T, ctx context.Context, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestVersion(t *testing.T) {
	setEnv(t, map[string]string{"REVIEWLEDGER_TOKENS": "bad"}) // not validated
	code, out, stderr := runCLI(t, context.Background(), "version")
	if code != 0 || !strings.HasPrefix(out, "reviewledger "+version) {
		t.Fatalf("version: exit %d, out %q, err %q", code, out, stderr)
	}
}

func TestInvalidConfigNamesTheSetting(t *testing.T) {
	dir := t.TempDir()
	badPolicy := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(badPolicy, []byte("classes:\n  caption_suggestion:\n    budget: 30s\n    budgett: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"short token", map[string]string{"REVIEWLEDGER_TOKENS": "submitter:alice:short"}, `REVIEWLEDGER_TOKENS: entry 1 ("alice"): token is shorter than 16 characters`},
		{"unknown role", map[string]string{"REVIEWLEDGER_TOKENS": "boss:alice:alice-token-0123456789"}, `REVIEWLEDGER_TOKENS: entry 1 ("alice"): role "boss"`},
		{"name twice", map[string]string{"REVIEWLEDGER_TOKENS": "submitter:alice:alice-token-0123456789,auditor:alice:other-token-0123456789"}, `REVIEWLEDGER_TOKENS: name "alice" is used twice`},
		{"malformed entry", map[string]string{"REVIEWLEDGER_TOKENS": "alice-token-0123456789"}, `REVIEWLEDGER_TOKENS: entry 1`},
		{"database url", map[string]string{"DATABASE_URL": "postgres://%zz"}, "DATABASE_URL"},
		{"addr", map[string]string{"REVIEWLEDGER_ADDR": "8080"}, "REVIEWLEDGER_ADDR"},
		{"provider", map[string]string{"REVIEWLEDGER_PROVIDER": "magic"}, "REVIEWLEDGER_PROVIDER: must be sim or http"},
		{"http provider without url", map[string]string{"REVIEWLEDGER_PROVIDER": "http"}, "REVIEWLEDGER_PROVIDER_URL"},
		{"http provider without secret", map[string]string{"REVIEWLEDGER_PROVIDER": "http", "REVIEWLEDGER_PROVIDER_URL": "http://provider.example/review"}, "REVIEWLEDGER_CALLBACK_SECRET: required"},
		{"secret prefix", map[string]string{"REVIEWLEDGER_CALLBACK_SECRET": "c2VjcmV0LXNlY3JldC1zZWNyZXQ="}, "REVIEWLEDGER_CALLBACK_SECRET: must start with whsec_"},
		{"secret base64", map[string]string{"REVIEWLEDGER_CALLBACK_SECRET": "whsec_!!!"}, "REVIEWLEDGER_CALLBACK_SECRET: the part after whsec_ is not base64"},
		{"body size", map[string]string{"REVIEWLEDGER_MAX_BODY_BYTES": "-1"}, "REVIEWLEDGER_MAX_BODY_BYTES"},
		{"sweep interval", map[string]string{"REVIEWLEDGER_SWEEP_INTERVAL": "often"}, "REVIEWLEDGER_SWEEP_INTERVAL"},
		{"policy file missing", map[string]string{"REVIEWLEDGER_POLICY": filepath.Join(dir, "none.yaml")}, "REVIEWLEDGER_POLICY"},
		{"policy unknown key", map[string]string{"REVIEWLEDGER_POLICY": badPolicy}, `REVIEWLEDGER_POLICY: ` + badPolicy + `: class "caption_suggestion": budgett: line 4: unknown key`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			code, _, stderr := runCLI(t, context.Background(), "migrate")
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and a message containing %q", code, stderr, tc.want)
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	setEnv(t, map[string]string{"DATABASE_URL": "", "REVIEWLEDGER_ADDR": ""})
	var cli CLI
	_, err := kongParse(&cli, "migrate")
	if err != nil {
		t.Fatal(err)
	}
	c := cli.Migrate.Config
	if c.DatabaseURL != "postgres://postgres@localhost:5432/reviewledger?sslmode=disable" || c.Addr != ":8080" ||
		c.Provider != "sim" || c.MaxBodyBytes != 4<<20 || c.SweepInterval != 5*time.Second ||
		len(c.Tokens) != 2 || c.Tokens[0].Name != "alice" || len(c.Policy.Classes) == 0 {
		t.Fatalf("defaults: %+v", c)
	}
	// Flags mirror the environment and win over it.
	if _, err := kongParse(&cli, "migrate", "--addr=127.0.0.1:9000", "--max-body-bytes=1024"); err != nil {
		t.Fatal(err)
	}
	if c := cli.Migrate.Config; c.Addr != "127.0.0.1:9000" || c.MaxBodyBytes != 1024 {
		t.Fatalf("flags: %+v", c)
	}
}

func TestMigrateTwice(t *testing.T) {
	// A schema of its own in a fresh database, so that every migration is
	// pending the first time.
	url := dbtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE SCHEMA fresh`)
	conn.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	setEnv(t, map[string]string{"DATABASE_URL": url + "&search_path=fresh"})

	code, out, stderr := runCLI(t, ctx, "migrate", "--status")
	if code != 0 || !strings.Contains(out, "0001_event\tpending") {
		t.Fatalf("status before migrating: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, "migrate")
	if code != 0 || !strings.Contains(out, "applied 0001") {
		t.Fatalf("first migrate: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, "migrate")
	if code != 0 || !strings.Contains(out, "database is up to date") {
		t.Fatalf("second migrate: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, stderr = runCLI(t, ctx, "migrate", "--status")
	if code != 0 || !strings.Contains(out, "0001_event\tapplied ") || strings.Contains(out, "pending") {
		t.Fatalf("status after migrating: exit %d, out %q, err %q", code, out, stderr)
	}
}

func TestServeHealthzAndShutdown(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	setEnv(t, map[string]string{"DATABASE_URL": dbtest.URL(t), "REVIEWLEDGER_ADDR": addr})

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCLI(t, ctx, "serve")
		done <- code
	}()
	clocktest.EventuallyShows(t, "serve to answer /healthz", func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://%s/healthz", addr))
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/healthz: %s", resp.Status)
		}
		return true, ""
	})
	cancel() // as SIGTERM does
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d after shutdown", code)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("serve did not shut down")
	}
}
