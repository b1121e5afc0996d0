package main

import (
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
)

// gcPercent returns the collector's current target.
func gcPercent() int {
	p := debug.SetGCPercent(100)
	debug.SetGCPercent(p)
	return p
}

func TestTuneGC(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }

	tuneGC(env(nil), quiet)
	if got := gcPercent(); got != serveGCPercent {
		t.Fatalf("with neither GOGC nor GOMEMLIMIT: GC percent %d, want %d", got, serveGCPercent)
	}
	for _, vars := range []map[string]string{{"GOGC": "100"}, {"GOMEMLIMIT": "512MiB"}} {
		debug.SetGCPercent(100)
		tuneGC(env(vars), quiet)
		if got := gcPercent(); got != 100 {
			t.Errorf("with %v: GC percent %d, want the operator's (100)", vars, got)
		}
	}
}
