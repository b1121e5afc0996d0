package main

import (
	"context"
	"strings"
	"testing"
	"time"
)

// serve refuses malformed webhook settings at start, naming the variable,
// and never quotes the secret.
func TestNotifyConfigNamesTheSetting(t *testing.T) {
	const secret = "whsec_bm90aWZ5LWtleS0wMTIzNDU2Nzg5YWJjZGVm"
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"URL without secret", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks"}, "REVIEWLEDGER_NOTIFY_SECRET: required"},
		{"secret without whsec_", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": strings.TrimPrefix(secret, "whsec_")}, "REVIEWLEDGER_NOTIFY_SECRET: must start with whsec_"},
		{"secret not base64", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": "whsec_***"}, "REVIEWLEDGER_NOTIFY_SECRET: the part after whsec_ is not base64"},
		{"short key", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": "whsec_c2hvcnQ="}, "REVIEWLEDGER_NOTIFY_SECRET: key is 5 bytes"},
		{"malformed secret, webhooks off", map[string]string{"REVIEWLEDGER_NOTIFY_SECRET": "nope"}, "REVIEWLEDGER_NOTIFY_SECRET: must start with whsec_"},
		{"URL scheme", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": secret}, "REVIEWLEDGER_NOTIFY_URL"},
		{"concurrency", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": secret, "REVIEWLEDGER_NOTIFY_CONCURRENCY": "0"}, "REVIEWLEDGER_NOTIFY_CONCURRENCY"},
		{"retry window", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": secret, "REVIEWLEDGER_NOTIFY_RETRY_FOR": "-1h"}, "REVIEWLEDGER_NOTIFY_RETRY_FOR"},
		{"from", map[string]string{"REVIEWLEDGER_NOTIFY_URL": "https://platform.example/hooks", "REVIEWLEDGER_NOTIFY_SECRET": secret, "REVIEWLEDGER_NOTIFY_FROM": "yesterday"}, "REVIEWLEDGER_NOTIFY_FROM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, nil)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(t, context.Background(), "serve")
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and a message containing %q", code, stderr, tc.want)
			}
			if strings.Contains(stderr, strings.TrimPrefix(secret, "whsec_")) {
				t.Errorf("stderr quotes the secret: %s", stderr)
			}
		})
	}
}

func TestNotifyConfigDefaults(t *testing.T) {
	setEnv(t, nil)
	var cli CLI
	if _, err := kongParse(&cli, "serve"); err != nil {
		t.Fatal(err)
	}
	n := cli.Serve.Notify
	if n.enabled() || n.Concurrency != 16 || n.Timeout != 10*time.Second || n.RetryFor != 24*time.Hour ||
		n.BackoffInitial != 5*time.Second || n.BackoffMax != time.Hour || n.From != "now" || n.Keep != 168*time.Hour {
		t.Fatalf("defaults: %+v", n)
	}
}
