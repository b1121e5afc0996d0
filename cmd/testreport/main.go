// Command testreport runs go test and reports as go test does, then ends
// with one line saying how many tests passed, failed and were skipped, and
// naming each skipped test with its reason, so that nothing is skipped
// silently. `make test` runs it:
//
//	go run ./cmd/testreport -race -count=1 ./...
//
// Its arguments go to `go test -json`. It prints the package lines ("ok",
// "FAIL", build errors) and the whole output of every failed test, and of
// every test left unfinished when its package failed (a panic, or go
// test's -timeout: the stacks go test prints then), counted as failed, and
// exits with go test's status.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
)

func main() { os.Exit(exitCode()) }

func exitCode() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := exec.CommandContext(ctx, "go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testreport:", err)
		return 2
	}
	r := newReport(os.Stdout)
	readErr := r.read(out)
	if readErr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	waitErr := cmd.Wait()
	fmt.Fprintln(os.Stdout, r.summary())
	switch {
	case readErr != nil:
		fmt.Fprintln(os.Stderr, "testreport:", readErr)
		return 2
	case waitErr != nil:
		var exit *exec.ExitError
		if errors.As(waitErr, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintln(os.Stderr, "testreport:", waitErr)
		return 2
	case r.failed > 0:
		return 1
	}
	return 0
}
