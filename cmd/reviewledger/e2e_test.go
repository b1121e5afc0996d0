package main

// Acceptance tests of `reviewledger serve` as a client of DESIGN 5 sees it:
// the real binary runs as a subprocess on its own database, with
// REVIEWLEDGER_PROVIDER=http pointing at a scripted provider (an
// httptest.Server in this process whose answer per review and attempt each
// test chooses). Everything is asserted over HTTP, on the CLI's exit codes
// and output, or on the ledger's rows.
//
// The scenarios sharing one server (TestE2E) run as parallel subtests; the
// audit, crash and configuration scenarios have servers of their own. Set
// E2E_KEEP_LOGS=1 to print every server's logs, not only a failing one's,
// and E2E_RACE=1 to build the served binary with the race detector (a
// server that reports a race fails the test).

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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
		if os.Getenv("E2E_RACE") != "" {
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
		"DATABASE_URL":                 dbURL,
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
	bin := binPath // built by reviewledgerBin
	addr, err := freeAddr()
	if err != nil {
		return nil, err
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

// --- HTTP client -----------------------------------------------------------

var e2eClient = &http.Client{Timeout: e2eWait}

// response is an HTTP answer read whole.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) String() string { return fmt.Sprintf("HTTP %d %s", r.Status, r.Body) }

// call sends a request with an optional bearer token and body (a []byte
// is sent as is, an io.Reader chunked, anything else as JSON).
func (p *serveProc) call(t testing.TB, method, path, token string, body any) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // no length known: sent chunked
		rd = b
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, p.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := e2eClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: raw}
}

// expect calls and fails unless the answer has status want.
func (p *serveProc) expect(t testing.TB, want int, method, path, token string, body any) response {
	t.Helper()
	res := p.call(t, method, path, token, body)
	if res.Status != want {
		t.Fatalf("%s %s: %s, want %d", method, path, res, want)
	}
	return res
}

func decode[T any](t testing.TB, res response) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(res.Body, &v); err != nil {
		t.Fatalf("decode %s: %v", res, err)
	}
	return v
}

// problem is an RFC 9457 body as a client reads it.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

// expectProblem calls, and checks the answer is a problem body with status
// want: application/problem+json with type, title and a matching status.
func (p *serveProc) expectProblem(t testing.TB, want int, method, path, token string, body any) problem {
	t.Helper()
	res := p.expect(t, want, method, path, token, body)
	return checkProblem(t, res, want)
}

func checkProblem(t testing.TB, res response, want int) problem {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		t.Errorf("%s: Content-Type %q, want application/problem+json", res, ct)
	}
	pr := decode[problem](t, res)
	if pr.Type == "" || pr.Title == "" || pr.Status != want {
		t.Errorf("problem body %s: want type, title and status %d", res.Body, want)
	}
	return pr
}

// reviewView is GET /v1/reviews/{id} (DESIGN 5.2).
type reviewView struct {
	ReviewID     string     `json:"review_id"`
	State        string     `json:"state"`
	ContentClass string     `json:"content_class"`
	Attempts     int        `json:"attempts"`
	Version      uint64     `json:"version"`
	SubmittedAt  time.Time  `json:"submitted_at"`
	Deadline     time.Time  `json:"deadline"`
	DecidedAt    *time.Time `json:"decided_at"`
	Reasons      []string   `json:"reasons"`
}

type eventView struct {
	Version    uint64          `json:"version"`
	Type       string          `json:"type"`
	RecordedAt time.Time       `json:"recorded_at"`
	Data       json.RawMessage `json:"data"`
}

// field returns a top-level field of the event's data, as JSON decodes it.
func (e eventView) field(name string) any {
	var m map[string]any
	_ = json.Unmarshal(e.Data, &m)
	return m[name]
}

type eventsView struct {
	ReviewID string      `json:"review_id"`
	Events   []eventView `json:"events"`
}

type queueItem struct {
	ReviewID       string     `json:"review_id"`
	ContentClass   string     `json:"content_class"`
	Reason         string     `json:"reason"`
	Attempts       int        `json:"attempts"`
	EscalatedAt    time.Time  `json:"escalated_at"`
	AgeSeconds     float64    `json:"age_seconds"`
	ClaimedBy      *string    `json:"claimed_by"`
	ClaimExpiresAt *time.Time `json:"claim_expires_at"`
}

type sloView struct {
	Total                  int64   `json:"total"`
	CompletedWithinBudget  int64   `json:"completed_within_budget"`
	WithinBudgetRatio      float64 `json:"within_budget_ratio"`
	Escalated              int64   `json:"escalated"`
	ConflictingCompletions int64   `json:"conflicting_completions"`
	LatencyMS              struct {
		P50 float64 `json:"p50"`
		P90 float64 `json:"p90"`
		P99 float64 `json:"p99"`
	} `json:"latency_ms"`
	ManualQueue struct {
		Depth            int64   `json:"depth"`
		OldestAgeSeconds float64 `json:"oldest_age_seconds"`
	} `json:"manual_queue"`
}

func submitBody(id, class, content string) map[string]any {
	return map[string]any{"review_id": id, "content_class": class, "content_type": "text/plain", "content": content}
}

// submit submits a new review and fails unless it is accepted (202).
func (p *serveProc) submit(t testing.TB, id, class, content string) reviewView {
	t.Helper()
	return decode[reviewView](t, p.expect(t, http.StatusAccepted, http.MethodPost, "/v1/reviews", tokSubmitter, submitBody(id, class, content)))
}

func (p *serveProc) review(t testing.TB, id string) reviewView {
	t.Helper()
	return decode[reviewView](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id, tokSubmitter, nil))
}

func (p *serveProc) events(t testing.TB, id string) []eventView {
	t.Helper()
	v := decode[eventsView](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/reviews/"+id+"/events", tokAuditor, nil))
	if v.ReviewID != id {
		t.Fatalf("events of %s name review %q", id, v.ReviewID)
	}
	return v.Events
}

func (p *serveProc) queue(t testing.TB, query string) []queueItem {
	t.Helper()
	v := decode[struct {
		Items []queueItem `json:"items"`
	}](t, p.expect(t, http.StatusOK, http.MethodGet, "/v1/manual-queue"+query, tokModerator, nil))
	return v.Items
}

func queued(items []queueItem, id string) (queueItem, bool) {
	for _, it := range items {
		if it.ReviewID == id {
			return it, true
		}
	}
	return queueItem{}, false
}

// waitSettled polls the review until it leaves pending and returns it.
func (p *serveProc) waitSettled(t testing.TB, id string) reviewView {
	t.Helper()
	var v reviewView
	eventually(t, "review "+id+" to leave pending", func() (bool, string) {
		v = p.review(t, id)
		return v.State != "pending", fmt.Sprintf("%+v", v)
	})
	return v
}

// waitQueued polls the manual queue until the review is in it.
func (p *serveProc) waitQueued(t testing.TB, id, class string) queueItem {
	t.Helper()
	var it queueItem
	eventually(t, "review "+id+" to reach the manual queue", func() (bool, string) {
		var ok bool
		it, ok = queued(p.queue(t, "?content_class="+class+"&limit=1000"), id)
		return ok, "not in the queue"
	})
	return it
}

// waitUnqueued polls the manual queue until the review has left it.
func (p *serveProc) waitUnqueued(t testing.TB, id, class string) {
	t.Helper()
	eventually(t, "review "+id+" to leave the manual queue", func() (bool, string) {
		it, ok := queued(p.queue(t, "?content_class="+class+"&limit=1000"), id)
		return !ok, fmt.Sprintf("still queued: %+v", it)
	})
}

// eventually polls cond until it holds or e2eWait passes; last describes
// what was seen, for the failure message.
func eventually(t testing.TB, what string, cond func() (ok bool, last string)) {
	t.Helper()
	deadline := time.Now().Add(e2eWait)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s; last seen: %s", e2eWait, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// eventTypes lists the events' types in order.
func eventTypes(evs []eventView) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func ofType(evs []eventView, typ string) []eventView {
	var out []eventView
	for _, e := range evs {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// --- scripted provider -----------------------------------------------------

// providerCall is one request the provider received.
type providerCall struct {
	IdempotencyKey string
	Attempt        string // X-Review-Attempt
	ContentType    string
	Body           map[string]any
}

// step answers one attempt.
type step func(p *scriptedProvider, w http.ResponseWriter, r *http.Request, reviewID string, attempt int)

// scriptedProvider is a DESIGN 5.4 provider whose answers each test
// scripts per review: the n-th step answers attempt n, the last step every
// attempt after it. Unscripted reviews are accepted.
type scriptedProvider struct {
	t      *testing.T
	srv    *httptest.Server
	closed chan struct{}

	mu        sync.Mutex
	target    string // the server's URL, for callbacks
	scripts   map[string][]step
	calls     map[string][]providerCall
	callbacks map[string][]int // statuses the server answered to callbacks
	cancelled map[string]int   // hanging requests the caller gave up on

	conflicts atomic.Int64 // callbacks answered 409
}

func newScriptedProvider(t *testing.T) *scriptedProvider {
	p := &scriptedProvider{
		t: t, closed: make(chan struct{}),
		scripts: map[string][]step{}, calls: map[string][]providerCall{}, callbacks: map[string][]int{},
		cancelled: map[string]int{},
	}
	p.srv = httptest.NewServer(http.HandlerFunc(p.serveHTTP))
	t.Cleanup(func() {
		close(p.closed)
		p.srv.Close()
	})
	return p
}

func (p *scriptedProvider) URL() string { return p.srv.URL + "/moderate" }

func (p *scriptedProvider) setTarget(url string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = url
}

// script sets the answers for a review's attempts.
func (p *scriptedProvider) script(reviewID string, steps ...step) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.scripts[reviewID] = steps
}

// seen returns the requests received for a review.
func (p *scriptedProvider) seen(reviewID string) []providerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls[reviewID])
}

// callbackStatuses returns the statuses of the callbacks sent for a review.
func (p *scriptedProvider) callbackStatuses(reviewID string) []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.callbacks[reviewID])
}

func (p *scriptedProvider) serveHTTP(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if r.Method != http.MethodPost || r.URL.Path != "/moderate" || json.Unmarshal(raw, &body) != nil {
		http.Error(w, "unexpected request", http.StatusTeapot)
		return
	}
	id, _ := body["review_id"].(string)
	attempt, _ := strconv.Atoi(r.Header.Get("X-Review-Attempt"))
	p.mu.Lock()
	p.calls[id] = append(p.calls[id], providerCall{
		IdempotencyKey: r.Header.Get("Idempotency-Key"),
		Attempt:        r.Header.Get("X-Review-Attempt"),
		ContentType:    r.Header.Get("Content-Type"),
		Body:           body,
	})
	steps := p.scripts[id]
	p.mu.Unlock()
	s := accept()
	if len(steps) > 0 {
		s = steps[min(max(attempt, 1), len(steps))-1]
	}
	s(p, w, r, id, attempt)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// finding answers 200 with a complete finding.
func finding(state string, reasons ...string) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, _ int) {
		writeJSON(w, http.StatusOK, map[string]any{"review_id": id, "state": state, "reasons": append([]string{}, reasons...)})
	}
}

func accept() step { return finding("accepted", "looks fine") }

// answer200 answers 200 with body, whatever it is.
func answer200(body func(id string) any) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, _ int) {
		writeJSON(w, http.StatusOK, body(id))
	}
}

// status answers code, with Retry-After when retryAfter is set.
func status(code int, retryAfter string) step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, _ string, _ int) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		writeJSON(w, code, map[string]any{"error": http.StatusText(code)})
	}
}

// hang never answers: the request ends when the caller gives up, which
// is counted.
func hang() step {
	return func(p *scriptedProvider, _ http.ResponseWriter, r *http.Request, id string, _ int) {
		select {
		case <-r.Context().Done():
			p.mu.Lock()
			p.cancelled[id]++
			p.mu.Unlock()
		case <-p.closed:
		}
	}
}

// cancellations returns how many of a review's hanging requests the
// caller cancelled.
func (p *scriptedProvider) cancellations(reviewID string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cancelled[reviewID]
}

// async answers 202; unless state is empty, the finding follows by a
// signed callback once the answer is sent.
func async(state string, reasons ...string) step {
	return func(p *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, attempt int) {
		w.WriteHeader(http.StatusAccepted)
		if state == "" {
			return
		}
		go func() {
			select { // let the 202 reach the caller first
			case <-time.After(20 * time.Millisecond):
			case <-p.closed:
				return
			}
			code, err := p.sendCallback(id, attempt, state, reasons, time.Now(), e2eSecretKey)
			if err != nil {
				code = -1
			}
			p.mu.Lock()
			p.callbacks[id] = append(p.callbacks[id], code)
			p.mu.Unlock()
		}()
	}
}

// callbackFirst sends the signed finding and waits for the server's answer
// before it answers 202: a provider faster than its own HTTP answer.
func callbackFirst(state string) step {
	return func(p *scriptedProvider, w http.ResponseWriter, _ *http.Request, id string, attempt int) {
		code, err := p.sendCallback(id, attempt, state, []string{"called back first"}, time.Now(), e2eSecretKey)
		if err != nil {
			code = -1
		}
		p.mu.Lock()
		p.callbacks[id] = append(p.callbacks[id], code)
		p.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}
}

// resetConnection drops the connection without an answer.
func resetConnection() step {
	return func(_ *scriptedProvider, w http.ResponseWriter, _ *http.Request, _ string, _ int) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}
}

// sendCallback posts a findings callback for the attempt, signed as the
// Standard Webhooks specification says with key at time ts, and returns
// the server's status.
func (p *scriptedProvider) sendCallback(id string, attempt int, state string, reasons []string, ts time.Time, key []byte) (int, error) {
	res, err := p.postCallback(id, attempt, state, reasons, ts, key)
	if err != nil {
		return 0, err
	}
	return res.Status, nil
}

func (p *scriptedProvider) postCallback(id string, attempt int, state string, reasons []string, ts time.Time, key []byte) (response, error) {
	body, _ := json.Marshal(map[string]any{"review_id": id, "attempt": attempt, "state": state, "reasons": append([]string{}, reasons...)})
	return p.postCallbackBody(id, body, ts, key)
}

// msgSeq numbers webhook-id values, unique within a test run.
var msgSeq atomic.Int64

// postCallbackBody posts body, signed, as the findings callback of review id.
func (p *scriptedProvider) postCallbackBody(id string, body []byte, ts time.Time, key []byte) (response, error) {
	p.mu.Lock()
	target := p.target
	p.mu.Unlock()
	req, err := http.NewRequest(http.MethodPost, target+"/v1/reviews/"+id+"/findings", bytes.NewReader(body))
	if err != nil {
		return response{}, err
	}
	msgID := fmt.Sprintf("msg_%s_%d", id, msgSeq.Add(1))
	stamp := strconv.FormatInt(ts.Unix(), 10)
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(msgID + "." + stamp + "." + string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("webhook-id", msgID)
	req.Header.Set("webhook-timestamp", stamp)
	req.Header.Set("webhook-signature", "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	res, err := e2eClient.Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if res.StatusCode == http.StatusConflict {
		p.conflicts.Add(1)
	}
	return response{Status: res.StatusCode, Header: res.Header, Body: raw}, err
}

// --- the shared server -----------------------------------------------------

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

// keys returns the sorted keys of a JSON object.
func keys(t testing.TB, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// hasKeys fails unless the JSON object has every key of want.
func hasKeys(t testing.TB, what string, raw []byte, want ...string) {
	t.Helper()
	got := keys(t, raw)
	for _, k := range want {
		if !slices.Contains(got, k) {
			t.Errorf("%s lacks %q: %s", what, k, raw)
		}
	}
}

func reviewIDf(format string, args ...any) string { return fmt.Sprintf(format, args...) }
