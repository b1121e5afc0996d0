package main

// Acceptance tests of `reviewledger serve` as a client of docs/contracts.md sees it:
// the real binary runs as a subprocess on its own database, with
// REVIEWLEDGER_PROVIDER=http pointing at a scripted provider (an
// httptest.Server in this process whose answer per review and attempt each
// test chooses). Everything is asserted over HTTP, on the CLI's exit codes
// and output, or on the ledger's rows.
//
// The scenarios sharing one server (TestE2E) run as parallel subtests; the
// others (audit, crash, restart, two processes, NATS, admission) start
// servers of their own. docs/testing.md lists what each covers. Set
// E2E_KEEP_LOGS=1 to print every server's logs, not only a failing one's.
// The served binary has the race detector when the tests have it (go test
// -race, as make test runs them) or E2E_RACE=1 is set; a server that
// reports a race fails its test.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// Bounds for a loaded two-core machine. They are deadlines for polling,
// never assertions on how long something took.
const (
	e2eStartTimeout = 60 * time.Second
	e2eWait         = 30 * time.Second
	e2eStopTimeout  = 20 * time.Second
)

// Tokens of REVIEWLEDGER_TOKENS for every role; two moderators for claims
// and four-eyes, a third for the browser.
const (
	tokSubmitter   = "submitter-token-e2e-sam-0001"
	tokModerator   = "moderator-token-e2e-mona-0001"
	tokModerator2  = "moderator-token-e2e-max-00002"
	tokModeratorUI = "moderator-token-e2e-uma-00003"
	tokAuditor     = "auditor-token-e2e-aud-000001"
	tokAdmin       = "admin-token-e2e-ada-00000001"
)

var e2eTokens = strings.Join([]string{
	"submitter:sam:" + tokSubmitter,
	"moderator:mona:" + tokModerator,
	"moderator:max:" + tokModerator2,
	"moderator:uma:" + tokModeratorUI,
	"auditor:aud:" + tokAuditor,
	"admin:ada:" + tokAdmin,
}, ",")

// e2eSecretKey signs provider callbacks; e2eSecret is it as
// REVIEWLEDGER_CALLBACK_SECRET.
var (
	e2eSecretKey = []byte("e2e-callback-key-0123456789abcdef")
	e2eSecret    = "whsec_" + base64.StdEncoding.EncodeToString(e2eSecretKey)
)

// e2ePolicy is the policy file of the servers: short budgets so scenarios
// end in seconds.
const e2ePolicy = `classes:
  e2e_fast:            # hangs time out after 1s; three attempts fit the budget
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_async:           # 202 answers wait up to 1.5s for their callback
    budget: 8s
    attempt_timeout: 1500ms
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_closed:          # fails closed
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: rejected
    priority: 1
  e2e_gate:            # a human confirms every automated acceptance
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    human_gate: true
    priority: 2
  e2e_four_eyes:       # and two of them must agree
    budget: 6s
    attempt_timeout: 1s
    max_attempts: 3
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    human_gate: true
    approvals: 2
    priority: 3
  e2e_crash:           # long attempts, so a kill lands mid-attempt
    budget: 20s
    attempt_timeout: 5s
    max_attempts: 2
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_crash_short:     # and a deadline that passes while no server runs
    budget: 5s
    attempt_timeout: 5s
    max_attempts: 2
    backoff: {initial: 50ms, max: 200ms, jitter: 20ms}
    on_exhaustion: manual_review
    priority: 1
`

// e2eMaxBody is REVIEWLEDGER_MAX_BODY_BYTES of the servers.
const e2eMaxBody = 64 << 10

// e2eSweep is REVIEWLEDGER_SWEEP_INTERVAL of the servers.
const e2eSweep = time.Second

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// TestMain removes the binary built for the end-to-end tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// reviewledgerBin builds the binary once per test run and returns its path.
func reviewledgerBin(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end tests build and run the binary; skipped with -short")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "reviewledger-e2e-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "reviewledger")
		args := []string{"build", "-o", binPath}
		if raceBuild || os.Getenv("E2E_RACE") != "" {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// e2eEnv is the environment of a reviewledger process: this process's,
// without any setting of the service's own, plus env.
func e2eEnv(env map[string]string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "REVIEWLEDGER_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		out = append(out, kv)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k+"="+env[k])
	}
	return out
}

// lockedBuffer collects a process's output while it runs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveProc is one `reviewledger serve` subprocess.
type serveProc struct {
	URL  string
	env  map[string]string
	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit, once done is closed

	stopOnce sync.Once
}

// e2eServer is a running server and what it was started with.
type e2eServer struct {
	*serveProc
	DatabaseURL string
	Provider    *scriptedProvider
}

// newE2EServer starts a provider, a fresh database and a server on them.
// extra overrides or adds settings.
func newE2EServer(t *testing.T, extra map[string]string) *e2eServer {
	t.Helper()
	prov := newScriptedProvider(t)
	dbURL := dbtest.URL(t)
	env := baseServeEnv(t, dbURL, prov.URL())
	for k, v := range extra {
		env[k] = v
	}
	proc := startServe(t, env)
	prov.setTarget(proc.URL)
	return &e2eServer{serveProc: proc, DatabaseURL: dbURL, Provider: prov}
}

// blankDatabase creates an empty database (no migrations applied) on the
// test server and returns its URL; it is dropped when the test ends.
func blankDatabase(t *testing.T) string {
	t.Helper()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = dbtest.DefaultURL
	}
	dbtest.URL(t) // skips, or fails under CI, when PostgreSQL is unreachable
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	name := fmt.Sprintf("reviewledger_e2e_%d_%d", time.Now().UnixNano(), os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
		defer cancel()
		admin, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop %s: %v", name, err)
			return
		}
		defer admin.Close(ctx)
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// baseServeEnv is the configuration every end-to-end server starts from.
func baseServeEnv(t *testing.T, dbURL, providerURL string) map[string]string {
	t.Helper()
	policy := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(policy, []byte(e2ePolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"DATABASE_URL":                 withPoolMax(t, dbURL, e2ePoolMax),
		"REVIEWLEDGER_POLICY":          policy,
		"REVIEWLEDGER_PROVIDER":        "http",
		"REVIEWLEDGER_PROVIDER_URL":    providerURL,
		"REVIEWLEDGER_TOKENS":          e2eTokens,
		"REVIEWLEDGER_CALLBACK_SECRET": e2eSecret,
		"REVIEWLEDGER_MAX_BODY_BYTES":  strconv.Itoa(e2eMaxBody),
		"REVIEWLEDGER_SWEEP_INTERVAL":  e2eSweep.String(),
		// Every retry the policy allows is made: the retry budget has its
		// own tests, and here it would make outcomes depend on the order
		// the parallel scenarios run in.
		"REVIEWLEDGER_RETRY_BUDGET": "1",
	}
}

// e2ePoolMax is the pool of each server (pool_max_conns in its
// DATABASE_URL): with the projections' lock connections about a dozen
// connections per server, so that the tests stay within a stock
// PostgreSQL's max_connections of 100 (serve would size its pool for its
// 16 workers otherwise).
const e2ePoolMax = 8

// withPoolMax returns the connection URL with pool_max_conns set.
func withPoolMax(t *testing.T, dbURL string, n int) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}

// freeAddr returns a 127.0.0.1 address nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

// startServe runs `reviewledger serve` with env on a free port and waits
// until /healthz answers. The process is stopped with SIGTERM when the test
// ends; it must then exit 0, having logged no error and no submitted
// content. Its logs are printed when the test fails.
func startServe(t *testing.T, env map[string]string) *serveProc {
	t.Helper()
	reviewledgerBin(t)
	p, err := startServeErr(t, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startServeErr is startServe for use off the test's goroutine: call
// reviewledgerBin first.
func startServeErr(t *testing.T, env map[string]string) (*serveProc, error) {
	for try := 1; ; try++ {
		p, err := tryServe(t, env)
		// Another process may take the free port before serve does.
		if err == nil || !strings.Contains(err.Error(), "address already in use") || try == 3 {
			return p, err
		}
	}
}

func tryServe(t *testing.T, env map[string]string) (*serveProc, error) {
	return tryServeBin(t, binPath, env) // built by reviewledgerBin
}

// tryServeBin starts the serve command of bin.
func tryServeBin(t *testing.T, bin string, env map[string]string) (*serveProc, error) {
	// A test that must know the address before the server starts (a
	// redirect URL names it) chooses it; any other gets a free one.
	addr := env["REVIEWLEDGER_ADDR"]
	if addr == "" {
		var err error
		if addr, err = freeAddr(); err != nil {
			return nil, err
		}
	}
	env = merged(env, map[string]string{"REVIEWLEDGER_ADDR": addr})
	p := &serveProc{URL: "http://" + addr, env: env, logs: &lockedBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(bin, "serve")
	p.cmd.Env = e2eEnv(env)
	p.cmd.Stdout = p.logs
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() { p.stop(t) })

	deadline := time.Now().Add(e2eStartTimeout)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("serve exited before answering: %v\n%s", p.err, p.logs.String())
		default:
		}
		res, err := http.Get(p.URL + "/healthz")
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("serve did not answer /healthz within %s\n%s", e2eStartTimeout, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM, unless it has exited, and checks
// how it went. Only the first call does anything.
func (p *serveProc) stop(t *testing.T) {
	p.stopOnce.Do(func() { p.stopAndCheck(t) })
}

func (p *serveProc) stopAndCheck(t *testing.T) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("serve on %s did not stop cleanly on SIGTERM: %v", p.URL, p.err)
			}
		case <-time.After(e2eStopTimeout):
			_ = p.cmd.Process.Kill()
			<-p.done
			t.Errorf("serve on %s did not stop within %s of SIGTERM", p.URL, e2eStopTimeout)
		}
	}
	logs := p.logs.String()
	if strings.Contains(logs, contentMarker) {
		t.Errorf("serve on %s logged submitted content", p.URL)
	}
	for _, bad := range []string{`"level":"ERROR"`, "panic:", "DATA RACE"} {
		if strings.Contains(logs, bad) {
			t.Errorf("serve on %s logged %s", p.URL, bad)
		}
	}
	if t.Failed() || os.Getenv("E2E_KEEP_LOGS") != "" {
		t.Logf("logs of serve on %s:\n%s", p.URL, logs)
	}
}

func (p *serveProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the process with SIGKILL, as a crash would.
func (p *serveProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func merged(a, b map[string]string) map[string]string {
	out := make(map[string]string, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// cli runs a reviewledger subcommand with the server's configuration and
// returns its exit code, stdout and stderr.
func (p *serveProc) cli(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return runBin(t, p.env, args...)
}

func runBin(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e2eWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, reviewledgerBin(t), args...)
	cmd.Env = e2eEnv(env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit) && ctx.Err() == nil:
		return exit.ExitCode(), out.String(), errOut.String()
	default:
		t.Fatalf("reviewledger %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
		return 0, "", ""
	}
}

// TestE2E runs the scenarios that can share one server, in parallel.
func TestE2E(t *testing.T) {
	t.Parallel()
	srv := newE2EServer(t, nil)

	t.Run("group", func(t *testing.T) {
		t.Run("submit and read", func(t *testing.T) { t.Parallel(); testSubmitAndRead(t, srv) })
		t.Run("timeouts escalate to the manual queue", func(t *testing.T) { t.Parallel(); testTimeoutsEscalate(t, srv) })
		t.Run("callbacks", func(t *testing.T) { t.Parallel(); testCallbacks(t, srv) })
		t.Run("provider answers", func(t *testing.T) { t.Parallel(); testProviderAnswers(t, srv) })
		t.Run("class policies", func(t *testing.T) { t.Parallel(); testClassPolicies(t, srv) })
		t.Run("browser", func(t *testing.T) { t.Parallel(); testBrowser(t, srv) })
	})
	t.Run("queue order and reads", func(t *testing.T) { testQueueAndReads(t, srv) })
}

// contentMarker is in every submitted content; the servers' logs must not
// show it.
const contentMarker = "E2E-CONTENT-MARKER-7c1f"

func content(s string) string { return contentMarker + " " + s }
