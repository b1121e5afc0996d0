package main

// The Node.js client (api/node) against the real server: this test builds
// the binary, starts `reviewledger serve` like the other end-to-end tests
// (a database of its own, the scripted provider, decision webhooks) and a
// second serve with an admission ceiling, then runs the package's own
// tests with Node's test runner (`node --test`) against them, and reports
// each Node test as a subtest of TestE2ENode, so that `make test` counts
// them. Without node and npm the test is skipped, and fails instead when
// CI is set.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// nodePolicy is the policy of the servers the Node tests use.
const nodePolicy = `classes:
  caption_suggestion:  # the docs' examples
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
  node_fast:           # hangs time out after 1s; three attempts fit the budget
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
  node_gate:           # a human confirms every automated acceptance
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    human_gate: true
    priority: 2
  node_bulk:           # human-gated too, for the bulk actions and the stream
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    human_gate: true
    priority: 2
  node_outage:         # a provider outage holds a review for two attempts of 2s
    budget: 8s
    attempt_timeout: 2s
    max_attempts: 2
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
`

// nodeDir is the Node.js package, from this package's directory.
const nodeDir = "../../api/node"

// nodeTools finds node (20 or later) and npm, or skips (fails under CI).
func nodeTools(t *testing.T) (node, npm string) {
	t.Helper()
	missing := func(format string, args ...any) {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if os.Getenv("CI") != "" {
			t.Fatalf("%s (CI is set: .ci/run installs nodejs and npm)", msg)
		}
		t.Skip(msg)
	}
	node, err := exec.LookPath("node")
	if err != nil {
		missing("node is not installed: the Node.js client's tests need Node 20.19 (or 22.12) or later")
	}
	npm, err = exec.LookPath("npm")
	if err != nil {
		missing("npm is not installed: the Node.js client's tests need it")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Fatalf("node --version: %v", err)
	}
	v := strings.TrimSpace(string(out))
	parts := strings.SplitN(strings.TrimPrefix(v, "v"), ".", 3)
	major, _ := strconv.Atoi(parts[0])
	minor := 0
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	// What the pinned Redocly and swagger-parser declare: ^20.19 || >=22.12.
	if !(major > 22 || major == 22 && minor >= 12 || major == 20 && minor >= 19) {
		missing("node %s is too old: the Node.js client's tests need 20.19 (or 22.12) or later", v)
	}
	return node, npm
}

// nodeInputs lists what the Node tests read besides the Go sources: the
// package, its tests and examples, the OpenAPI document and docs/api.md.
// The test reads each, so that go test's cache knows them: a change to
// any of them runs the test again.
func nodeInputs(t *testing.T) {
	t.Helper()
	var files []string
	for _, dir := range []string{"src", "src/generated", "test", "examples"} {
		entries, err := os.ReadDir(filepath.Join(nodeDir, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if !e.IsDir() {
				files = append(files, filepath.Join(nodeDir, dir, e.Name()))
			}
		}
	}
	for _, f := range []string{"package.json", "package-lock.json", "tsconfig.json", "tsconfig.check.json", "README.md"} {
		files = append(files, filepath.Join(nodeDir, f))
	}
	files = append(files, filepath.Join(nodeDir, "..", "openapi.json"), filepath.Join(nodeDir, "..", "..", "docs", "api.md"))
	for _, f := range files {
		if _, err := os.ReadFile(f); err != nil {
			t.Fatal(err)
		}
	}
}

// npmCI installs the package's dependencies as package-lock.json says when
// node_modules is missing or older than the lock file.
func npmCI(t *testing.T, npm string) {
	t.Helper()
	lock, err := os.Stat(filepath.Join(nodeDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	installed, err := os.Stat(filepath.Join(nodeDir, "node_modules", ".package-lock.json"))
	if err == nil && !installed.ModTime().Before(lock.ModTime()) {
		return
	}
	runIn(t, nodeDir, 5*time.Minute, npm, "ci", "--no-audit", "--no-fund", "--loglevel=error")
}

// runIn runs a command in dir and fails the test with its output when it
// fails.
func runIn(t *testing.T, dir string, timeout time.Duration, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// providerControl lets the Node tests script the provider over HTTP:
// POST /script {"review_id", "steps": [...]} with steps "accept",
// "reject", "hang", "reset", "async:<state>" and "status:<code>[:<Retry-After>]";
// GET /calls?review_id= lists the provider requests of a review.
func providerControl(t *testing.T, prov *scriptedProvider) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /script", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			ReviewID string   `json:"review_id"`
			Steps    []string `json:"steps"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.ReviewID == "" || len(req.Steps) == 0 {
			http.Error(w, "want {review_id, steps}", http.StatusBadRequest)
			return
		}
		steps := make([]step, 0, len(req.Steps))
		for _, s := range req.Steps {
			st, err := parseStep(s)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			steps = append(steps, st)
		}
		prov.script(req.ReviewID, steps...)
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /calls", func(w http.ResponseWriter, r *http.Request) {
		calls := prov.seen(r.URL.Query().Get("review_id"))
		out := make([]map[string]string, 0, len(calls))
		for _, c := range calls {
			out = append(out, map[string]string{"idempotency_key": c.IdempotencyKey, "attempt": c.Attempt})
		}
		writeJSON(w, http.StatusOK, out)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func parseStep(s string) (step, error) {
	name, arg, _ := strings.Cut(s, ":")
	switch name {
	case "accept":
		return accept(), nil
	case "reject":
		return finding("rejected", "not allowed"), nil
	case "hang":
		return hang(), nil
	case "reset":
		return resetConnection(), nil
	case "async":
		return async(arg), nil
	case "status":
		code, retryAfter, _ := strings.Cut(arg, ":")
		n, err := strconv.Atoi(code)
		if err != nil {
			return nil, fmt.Errorf("step %q: bad status", s)
		}
		return status(n, retryAfter), nil
	}
	return nil, fmt.Errorf("unknown step %q", s)
}

// TestE2ENode runs the Node.js client's tests (api/node/test) against two
// servers: the main one, sending decision webhooks to an address the Node
// tests listen on, and one with REVIEWLEDGER_MAX_IN_FLIGHT=1, where a
// provider outage makes submits wait.
func TestE2ENode(t *testing.T) {
	t.Parallel()
	node, npm := nodeTools(t)
	reviewledgerBin(t)
	nodeInputs(t)
	npmCI(t, npm)
	// Build the package, and check the examples against its declarations.
	runIn(t, nodeDir, 3*time.Minute, node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.json")
	runIn(t, nodeDir, 3*time.Minute, node, "node_modules/typescript/bin/tsc", "-p", "tsconfig.check.json")

	prov := newScriptedProvider(t)
	control := providerControl(t, prov)
	policy := filepath.Join(t.TempDir(), "node-policy.yaml")
	if err := os.WriteFile(policy, []byte(nodePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	notifyAddr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	env := merged(baseServeEnv(t, dbtest.URL(t), prov.URL()), map[string]string{
		"REVIEWLEDGER_POLICY":                 policy,
		"REVIEWLEDGER_NOTIFY_URL":             "http://" + notifyAddr + "/webhooks",
		"REVIEWLEDGER_NOTIFY_SECRET":          e2eNotifySecret,
		"REVIEWLEDGER_NOTIFY_TIMEOUT":         "2s",
		"REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL": "100ms",
		"REVIEWLEDGER_NOTIFY_BACKOFF_MAX":     "2s", // undelivered webhooks of other tests retry, while nobody listens, without a storm
		"REVIEWLEDGER_NOTIFY_RETRY_FOR":       "10m",
	})
	primary := startServe(t, env)
	prov.setTarget(primary.URL)
	admission := startServe(t, merged(baseServeEnv(t, dbtest.URL(t), prov.URL()), map[string]string{
		"REVIEWLEDGER_POLICY":        policy,
		"REVIEWLEDGER_MAX_IN_FLIGHT": "1",
	}))

	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	files, err := filepath.Glob(filepath.Join(nodeDir, "test", "*.test.js"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Node tests in %s/test (%v)", nodeDir, err)
	}
	// One file at a time: the webhook tests take turns on the notify address.
	args := []string{"--test", "--test-reporter=tap", "--test-concurrency=1", "--test-timeout=120000"}
	for _, f := range files {
		args = append(args, filepath.Join("test", filepath.Base(f)))
	}
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Dir = nodeDir
	cmd.Env = append(os.Environ(),
		"RL_URL="+primary.URL,
		"RL_ADMISSION_URL="+admission.URL,
		"RL_PROVIDER_CONTROL="+control.URL,
		"RL_NOTIFY_ADDR="+notifyAddr,
		"RL_NOTIFY_SECRET="+e2eNotifySecret,
		"RL_TOKEN_SUBMITTER="+tokSubmitter,
		"RL_TOKEN_MODERATOR="+tokModerator,
		"RL_TOKEN_MODERATOR2="+tokModerator2,
		"RL_TOKEN_AUDITOR="+tokAuditor,
		"RL_TOKEN_ADMIN="+tokAdmin,
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	if os.Getenv("E2E_KEEP_LOGS") != "" {
		t.Logf("node --test:\n%s\n%s", out, stderr.String())
	}
	results := parseTAP(string(out))
	if len(results.children) == 0 {
		t.Fatalf("node --test reported no test (%v)\nstdout:\n%s\nstderr:\n%s", runErr, out, stderr.String())
	}
	for _, r := range results.children {
		reportTAP(t, r)
	}
	if runErr != nil && !results.failed() {
		t.Errorf("node --test: %v, though no test failed\nstdout:\n%s\nstderr:\n%s", runErr, out, stderr.String())
	}
}

// tapResult is one test of a TAP stream, with its subtests.
type tapResult struct {
	name     string
	ok       bool
	skip     string // the reason, when skipped
	details  []string
	children []*tapResult
}

func (r *tapResult) failed() bool {
	if !r.ok && r.name != "" {
		return true
	}
	for _, c := range r.children {
		if c.failed() {
			return true
		}
	}
	return false
}

var (
	tapResultLine = regexp.MustCompile(`^( *)(ok|not ok) \d+ - (.*?)(?: # (SKIP|TODO)\b ?(.*))?$`)
	tapSubtest    = regexp.MustCompile(`^( *)# Subtest: (.*)$`)
)

// parseTAP reads what `node --test --test-reporter=tap` prints: subtests
// are indented four spaces per level and announced by "# Subtest:",
// each ends with its ok or not ok line and a YAML block of details.
func parseTAP(out string) *tapResult {
	root := &tapResult{ok: true}
	// pending[level] holds the finished results of that level not yet
	// claimed by their parent's result line.
	pending := map[int][]*tapResult{}
	var last *tapResult
	inYAML := false
	indent := ""
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if inYAML {
			if strings.TrimSpace(line) == "..." {
				inYAML = false
			} else if last != nil {
				last.details = append(last.details, strings.TrimPrefix(line, indent))
			}
			continue
		}
		if tapSubtest.MatchString(line) {
			continue
		}
		if m := tapResultLine.FindStringSubmatch(line); m != nil {
			level := len(m[1]) / 4
			r := &tapResult{name: m[3], ok: m[2] == "ok"}
			if m[4] == "SKIP" {
				r.skip = strings.TrimSpace(m[5])
				if r.skip == "" {
					r.skip = "skipped"
				}
			}
			r.children = pending[level+1]
			delete(pending, level+1)
			pending[level] = append(pending[level], r)
			last = r
			continue
		}
		if strings.TrimSpace(line) == "---" && last != nil {
			inYAML = true
			indent, _, _ = strings.Cut(line, "---")
		}
	}
	root.children = pending[0]
	return root
}

// reportTAP reports a Node test and its subtests as subtests of t.
func reportTAP(t *testing.T, r *tapResult) {
	t.Helper()
	t.Run(r.name, func(t *testing.T) {
		for _, c := range r.children {
			reportTAP(t, c)
		}
		switch {
		case r.skip != "":
			t.Skip(r.skip)
		case !r.ok:
			t.Errorf("node test %q failed:\n%s", r.name, strings.Join(r.details, "\n"))
		}
	})
}
