package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EInvalidConfig: serve refuses a bad configuration at start, exits
// non-zero, and names the setting (and, for the policy file, the file,
// class and key).
func TestE2EInvalidConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	policy := func(name, class string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("classes:\n  "+class), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const good = "budget: 3s\n    attempt_timeout: 1s\n    max_attempts: 2\n    backoff: {initial: 50ms, max: 100ms, jitter: 10ms}\n    on_exhaustion: manual_review\n"
	unknownKey := policy("unknown-key.yaml", "cap_a:\n    "+good+"    max_attempt: 3\n")
	aboveBudget := policy("above-budget.yaml", "cap_b:\n    "+strings.Replace(good, "attempt_timeout: 1s", "attempt_timeout: 5s", 1))
	badExhaustion := policy("exhaustion.yaml", "cap_c:\n    "+strings.Replace(good, "on_exhaustion: manual_review", "on_exhaustion: shrug", 1))
	zeroBudget := policy("zero.yaml", "cap_d:\n    "+strings.Replace(good, "budget: 3s", "budget: 0s", 1))

	valid := map[string]string{
		// Nothing listens there: a configuration error must come first.
		"DATABASE_URL":                 "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1",
		"REVIEWLEDGER_ADDR":            "127.0.0.1:0",
		"REVIEWLEDGER_PROVIDER":        "http",
		"REVIEWLEDGER_PROVIDER_URL":    "http://127.0.0.1:1/moderate",
		"REVIEWLEDGER_TOKENS":          e2eTokens,
		"REVIEWLEDGER_CALLBACK_SECRET": e2eSecret,
	}
	cases := []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"short token", map[string]string{"REVIEWLEDGER_TOKENS": "submitter:sam:short-token"}, []string{"REVIEWLEDGER_TOKENS", "16"}},
		{"unknown provider", map[string]string{"REVIEWLEDGER_PROVIDER": "bogus"}, []string{"REVIEWLEDGER_PROVIDER", "bogus"}},
		{"http provider without a URL", map[string]string{"REVIEWLEDGER_PROVIDER_URL": ""}, []string{"REVIEWLEDGER_PROVIDER_URL"}},
		{"callback secret without whsec_", map[string]string{"REVIEWLEDGER_CALLBACK_SECRET": "secret"}, []string{"REVIEWLEDGER_CALLBACK_SECRET"}},
		{"body limit", map[string]string{"REVIEWLEDGER_MAX_BODY_BYTES": "lots"}, []string{"REVIEWLEDGER_MAX_BODY_BYTES"}},
		{"sweep interval", map[string]string{"REVIEWLEDGER_SWEEP_INTERVAL": "0s"}, []string{"REVIEWLEDGER_SWEEP_INTERVAL"}},
		{"work topic", map[string]string{"REVIEWLEDGER_WORK_TOPIC": "work topic!"}, []string{"REVIEWLEDGER_WORK_TOPIC"}},
		{"missing policy file", map[string]string{"REVIEWLEDGER_POLICY": filepath.Join(dir, "absent.yaml")}, []string{"REVIEWLEDGER_POLICY", "absent.yaml"}},
		{"policy: unknown key", map[string]string{"REVIEWLEDGER_POLICY": unknownKey}, []string{"REVIEWLEDGER_POLICY", unknownKey, "cap_a", "max_attempt"}},
		{"policy: attempt_timeout above budget", map[string]string{"REVIEWLEDGER_POLICY": aboveBudget}, []string{"REVIEWLEDGER_POLICY", aboveBudget, "cap_b", "attempt_timeout"}},
		{"policy: unknown on_exhaustion", map[string]string{"REVIEWLEDGER_POLICY": badExhaustion}, []string{"REVIEWLEDGER_POLICY", badExhaustion, "cap_c", "on_exhaustion"}},
		{"policy: zero budget", map[string]string{"REVIEWLEDGER_POLICY": zeroBudget}, []string{"REVIEWLEDGER_POLICY", zeroBudget, "cap_d", "budget"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			code, out, errOut := runBin(t, merged(valid, tc.env), "serve")
			if code == 0 {
				t.Fatalf("serve exited 0 with %v", tc.env)
			}
			for _, want := range tc.want {
				if !strings.Contains(errOut, want) {
					t.Errorf("exit %d; stderr does not name %q:\n%s%s", code, want, errOut, out)
				}
			}
		})
	}
}
