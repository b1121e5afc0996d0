package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent).
type event struct {
	Action     string
	Package    string
	ImportPath string // build-output events
	Test       string
	Output     string
}

// skipped is a test that did not run to the end, and why.
type skipped struct {
	pkg, test, reason string
}

// report follows the events of one go test run.
type report struct {
	w              io.Writer
	output         map[string][]string // by package and test: lines so far
	passed, failed int
	skips          []skipped
}

func newReport(w io.Writer) *report {
	return &report{w: w, output: make(map[string][]string)}
}

// read consumes the event stream until it ends.
func (r *report) read(in io.Reader) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			// Not an event (the go command's own messages): pass it on.
			fmt.Fprintf(r.w, "%s\n", line)
			continue
		}
		r.handle(e)
	}
	return sc.Err()
}

func (r *report) handle(e event) {
	key := e.Package + "\x00" + e.Test
	switch {
	case e.Action == "build-output":
		fmt.Fprint(r.w, e.Output)
	case e.Test == "" && e.Action == "fail":
		r.unfinished(e.Package)
	case e.Test == "" && e.Action == "output":
		// Package lines: "ok", "FAIL", "?   … [no test files]", panics
		// outside tests. "PASS" alone is what -v adds; go test without it
		// does not print it.
		if strings.TrimSpace(e.Output) != "PASS" {
			fmt.Fprint(r.w, e.Output)
		}
	case e.Test == "":
	case e.Action == "output":
		r.output[key] = append(r.output[key], e.Output)
	case e.Action == "pass":
		r.passed++
		delete(r.output, key)
	case e.Action == "fail":
		r.failed++
		for _, l := range r.output[key] {
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprint(r.w, l)
			}
		}
		delete(r.output, key)
	case e.Action == "skip":
		r.skips = append(r.skips, skipped{pkg: e.Package, test: e.Test, reason: skipReason(r.output[key])})
		delete(r.output, key)
	}
}

// unfinished reports the tests of pkg that neither passed, failed nor
// were skipped when the package failed: those running when its binary
// panicked or hit go test's -timeout, whose output (the panic and every
// goroutine's stack) go test -json gives to the innermost of them and
// ends with no event of their own. Each is counted as failed.
func (r *report) unfinished(pkg string) {
	var tests []string
	for key := range r.output {
		if p, test, _ := strings.Cut(key, "\x00"); p == pkg {
			tests = append(tests, test)
		}
	}
	sort.Strings(tests)
	for _, test := range tests {
		key := pkg + "\x00" + test
		r.failed++
		for _, l := range r.output[key] {
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprint(r.w, l)
			}
		}
		fmt.Fprintf(r.w, "--- UNFINISHED: %s (running when %s failed)\n", test, pkg)
		delete(r.output, key)
	}
}

// logLine is a line t.Log, t.Skip and friends print: "    file_test.go:12: message".
var logLine = regexp.MustCompile(`^\s+[\w.-]+\.go:\d+: (.*)$`)

// skipReason is what the skipped test logged, the message of t.Skip last.
func skipReason(lines []string) string {
	var msgs []string
	for _, l := range lines {
		if m := logLine.FindStringSubmatch(strings.TrimRight(l, "\n")); m != nil {
			msgs = append(msgs, m[1])
		}
	}
	if len(msgs) == 0 {
		return "no reason given"
	}
	return msgs[len(msgs)-1]
}

// summary is the last line of the run.
func (r *report) summary() string {
	s := fmt.Sprintf("tests: %d passed, %d failed, %d skipped", r.passed, r.failed, len(r.skips))
	if len(r.skips) == 0 {
		return s + "; nothing skipped"
	}
	sort.Slice(r.skips, func(i, j int) bool {
		if r.skips[i].pkg != r.skips[j].pkg {
			return r.skips[i].pkg < r.skips[j].pkg
		}
		return r.skips[i].test < r.skips[j].test
	})
	parts := make([]string, len(r.skips))
	for i, sk := range r.skips {
		parts[i] = fmt.Sprintf("%s %s (%s)", sk.pkg, sk.test, sk.reason)
	}
	return s + ": " + strings.Join(parts, "; ")
}
