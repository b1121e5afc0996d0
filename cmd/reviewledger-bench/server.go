package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// benchClass is the content class of every review: no human gate, a budget
// far above any latency seen here, so each review ends accepted.
const benchPolicy = `classes:
  bench:
    budget: 60s
    attempt_timeout: 10s
    max_attempts: 3
    backoff: {initial: 100ms, max: 2s, jitter: 75ms}
    on_exhaustion: manual_review
    priority: 1
`

const benchClass = "bench"

// database creates a fresh database on adminURL; drop removes it.
func database(ctx context.Context, adminURL string) (dbURL string, drop func() error, err error) {
	admin, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("-admin-url: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	name := "reviewledger_bench_" + randomHex(6)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("-admin-url: create database: %w", err)
	}
	drop = func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, adminURL)
		if err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			return fmt.Errorf("drop database %s: %w", name, err)
		}
		return nil
	}
	u, err := url.Parse(adminURL)
	if err != nil {
		return "", nil, fmt.Errorf("-admin-url: %w", err)
	}
	u.Path = "/" + name
	return u.String(), drop, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// instantProvider answers every attempt at once with an accepting finding,
// as the http provider protocol has it.
func instantProvider() (*http.Server, string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, "", err
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			ReviewID string `json:"review_id"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"review_id":%q,"state":"accepted","reasons":[]}`, body.ReviewID)
	})}
	go func() { _ = srv.Serve(l) }()
	return srv, "http://" + l.Addr().String() + "/moderate", nil
}

// server is a running reviewledger serve, or a floor's server.
type server struct {
	URL   string
	name  string // "serve", or the floor's command and mode
	cmd   *exec.Cmd
	logs  *lockedBuffer
	done  chan struct{}
	err   error
	dir   string
	token string
	debug string // base URL of the profiling endpoints, when on
}

// profile writes a CPU profile of seconds to file.
func (s *server) profile(ctx context.Context, seconds int, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", s.debug, seconds), nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := f.ReadFrom(res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const (
	submitterToken = "bench-submitter-token-0001"
	auditorToken   = "bench-auditor-token-00001"
	moderatorToken = "bench-moderator-token-001"
)

// startServer runs bin serve on dbURL against providerURL (or, with a
// floor's mode, that floor's server: floor.go) and waits for /healthz.
func startServer(ctx context.Context, cfg Config, floorMode, dbURL, providerURL string) (*server, error) {
	dir, err := os.MkdirTemp("", "reviewledger-bench-")
	if err != nil {
		return nil, err
	}
	s, err := launch(ctx, cfg, floorMode, dir, dbURL, providerURL)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// launch starts serve (or a floor's server) with its files in dir and
// waits for /healthz; on failure the process is stopped (dir is the
// caller's to remove).
func launch(ctx context.Context, cfg Config, floorMode, dir, dbURL, providerURL string) (*server, error) {
	policy := filepath.Join(dir, "policy.yaml")
	pol := benchPolicy
	if cfg.Policy != "" {
		pol = cfg.Policy
	}
	if err := os.WriteFile(policy, []byte(pol), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	s := &server{URL: "http://" + addr, logs: &lockedBuffer{}, done: make(chan struct{}), dir: dir, token: submitterToken}
	s.cmd, s.name = exec.Command(cfg.Bin, "serve"), "serve"
	if floorMode != "" {
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("the floors run this binary: %w", err)
		}
		args := floorArgs(floorMode, cfg)
		s.cmd, s.name = exec.Command(self, args...), strings.Join(args[:2], " ")
	}
	// serve ends with the bench, however the bench ends (Linux).
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	s.cmd.Env = append(cleanEnv(),
		"DATABASE_URL="+dbURL,
		"REVIEWLEDGER_ADDR="+addr,
		"REVIEWLEDGER_POLICY="+policy,
		"REVIEWLEDGER_PROVIDER=http",
		"REVIEWLEDGER_PROVIDER_URL="+providerURL,
		"REVIEWLEDGER_CALLBACK_SECRET=whsec_"+"YmVuY2gtY2FsbGJhY2stc2VjcmV0LTMyLWJ5dGVzISE=",
		"REVIEWLEDGER_TOKENS=submitter:bench:"+submitterToken+",auditor:bench-auditor:"+auditorToken+",moderator:bench-moderator:"+moderatorToken,
	)
	if cfg.Profile != "" && floorMode == "" {
		debug, err := freeAddr()
		if err != nil {
			return nil, err
		}
		s.debug = "http://" + debug
		s.cmd.Env = append(s.cmd.Env, "REVIEWLEDGER_DEBUG_ADDR="+debug)
	}
	s.cmd.Env = append(s.cmd.Env, cfg.ServeEnv...)
	var out io.Writer = s.logs
	if cfg.KeepLogs {
		out = io.MultiWriter(s.logs, os.Stderr)
	}
	s.cmd.Stdout, s.cmd.Stderr = out, out
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s (%s): %w", s.name, s.cmd.Path, err)
	}
	go func() { s.err = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(60 * time.Second)
	probe := &http.Client{Timeout: 2 * time.Second}
	for {
		select {
		case <-s.done:
			return nil, fmt.Errorf("%s exited: %v\n%s", s.name, s.err, s.logs.String())
		case <-ctx.Done():
			_ = s.stop() // the context's end is the error to report
			return nil, ctx.Err()
		default:
		}
		if res, err := probe.Get(s.URL + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return s, nil
			}
		}
		if time.Now().After(deadline) {
			_ = s.stop() // not answering is the error to report
			return nil, fmt.Errorf("%s did not answer /healthz in 60s\n%s", s.name, s.logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// freeAddr is a loopback address with a port free a moment ago, for serve
// to listen on (another process may take it first: serve then fails to
// start, and the run with it).
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// cleanEnv is this process's environment without settings of the service.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REVIEWLEDGER_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

// stop ends the server with SIGTERM and waits for it.
func (s *server) stop() error {
	defer os.RemoveAll(s.dir)
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(30 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.done
			return fmt.Errorf("%s did not stop within 30s of SIGTERM", s.name)
		}
	}
	if s.err != nil {
		return fmt.Errorf("%s: %w", s.name, s.err)
	}
	return nil
}

// cpu is the server's CPU time (user and system) so far.
func (s *server) cpu() (time.Duration, error) { return processCPU(s.cmd.Process.Pid) }

// peakRSS is the server's resident memory high-water mark (VmHWM).
func (s *server) peakRSS() (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	return vmHWM(string(b))
}

// vmHWM is the resident memory high-water mark in the contents of
// /proc/<pid>/status, in bytes.
func vmHWM(status string) (uint64, error) {
	for _, line := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM in /proc status")
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
