package client_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMain starts the reviewledger the examples talk to: the binary built
// from cmd/reviewledger, serving on a database of its own with the
// simulator answering every review accepted within milliseconds, and
// sending its webhooks to webhookListener. Without PostgreSQL (or with
// -short) only the tests run, and it says so; with CI set, it fails.
func TestMain(m *testing.M) {
	flag.Parse()
	stop, err := startReviewledger()
	if err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintln(os.Stderr, "client examples: cannot start reviewledger:", err)
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "client examples: not run:", err)
		_ = flag.Set("test.run", "^Test")
	}
	code := m.Run()
	if err := stop(); err != nil {
		fmt.Fprintln(os.Stderr, "client examples:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func startReviewledger() (stop func() error, err error) {
	stop = func() error { return nil }
	if testing.Short() {
		return stop, errors.New("-short: the examples start reviewledger")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base := os.Getenv("TEST_DATABASE_URL")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgx.Connect(ctx, base)
	if err != nil {
		return stop, fmt.Errorf("PostgreSQL unreachable: %w", err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	// Named as migrations/dbtest names its databases, so that one left
	// behind by a killed run is dropped by a later one.
	name := fmt.Sprintf("reviewledger_test_%d_client%d", time.Now().Unix(), os.Getpid())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return stop, err
	}
	drop := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		return err
	}
	stop = drop
	u, err := url.Parse(base)
	if err != nil {
		return stop, err
	}
	u.Path = "/" + name

	dir, err := os.MkdirTemp("", "reviewledger-client-")
	if err != nil {
		return stop, err
	}
	stop = func() error { os.RemoveAll(dir); return drop() }
	bin := filepath.Join(dir, "reviewledger")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "../../cmd/reviewledger").CombinedOutput(); err != nil {
		return stop, fmt.Errorf("go build: %v\n%s", err, out)
	}
	if webhookListener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return stop, err
	}
	addr, err := freeAddr()
	if err != nil {
		return stop, err
	}
	reviewledgerURL = "http://" + addr
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(environ(),
		"DATABASE_URL="+u.String(),
		"REVIEWLEDGER_ADDR="+addr,
		"REVIEWLEDGER_TOKENS=submitter:platform:"+submitterToken,
		"REVIEWLEDGER_PROVIDER=sim",
		"REVIEWLEDGER_SIM_MEDIAN_LATENCY=10ms", "REVIEWLEDGER_SIM_P99_LATENCY=50ms",
		"REVIEWLEDGER_SIM_TIMEOUT_RATE=0", "REVIEWLEDGER_SIM_ERROR_RATE=0", "REVIEWLEDGER_SIM_INVALID_RATE=0",
		"REVIEWLEDGER_SIM_ASYNC_RATE=0", "REVIEWLEDGER_SIM_REJECT_RATE=0",
		"REVIEWLEDGER_NOTIFY_URL=http://"+webhookListener.Addr().String()+"/webhooks",
		"REVIEWLEDGER_NOTIFY_SECRET="+notifySecret,
		"REVIEWLEDGER_NOTIFY_FROM=start",
		"REVIEWLEDGER_NOTIFY_TIMEOUT=2s", "REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL=100ms", "REVIEWLEDGER_NOTIFY_BACKOFF_MAX=1s",
	)
	logs := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		return stop, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopServe := func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				return fmt.Errorf("reviewledger exited with %v:\n%s", err, logs.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			return fmt.Errorf("reviewledger did not stop within 30s of SIGTERM (killed: %v)", <-exited)
		}
		if os.Getenv("CLIENT_EXAMPLE_LOGS") != "" {
			fmt.Fprintln(os.Stderr, logs.String())
		}
		return nil
	}
	stop = func() error {
		err := stopServe()
		os.RemoveAll(dir)
		return errors.Join(err, drop())
	}
	for {
		select {
		case err := <-exited:
			exited <- err
			return stop, fmt.Errorf("reviewledger exited at start: %v\n%s", err, logs.String())
		case <-ctx.Done():
			return stop, fmt.Errorf("reviewledger did not answer /healthz in time:\n%s", logs.String())
		case <-time.After(50 * time.Millisecond):
		}
		if res, err := http.Get(reviewledgerURL + "/healthz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return stop, nil
			}
		}
	}
}

// environ is this process's environment without the service's settings.
func environ() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "REVIEWLEDGER_") && !strings.HasPrefix(kv, "DATABASE_URL=") {
			out = append(out, kv)
		}
	}
	return out
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
