package main

import (
	"strings"
	"testing"
)

// A stream as go test -json writes it: one package passes with a skipped
// test and a skipped subtest, one fails.
const stream = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK"}
{"Action":"run","Package":"example.com/a","Test":"TestBrowser"}
{"Action":"output","Package":"example.com/a","Test":"TestBrowser","Output":"=== RUN   TestBrowser\n"}
{"Action":"output","Package":"example.com/a","Test":"TestBrowser","Output":"    browser_test.go:40: no Chromium found (set CI to fail instead)\n"}
{"Action":"output","Package":"example.com/a","Test":"TestBrowser","Output":"--- SKIP: TestBrowser (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestBrowser"}
{"Action":"run","Package":"example.com/a","Test":"TestSuite/nats"}
{"Action":"output","Package":"example.com/a","Test":"TestSuite/nats","Output":"    --- SKIP: TestSuite/nats (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestSuite/nats"}
{"Action":"output","Package":"example.com/a","Output":"PASS\n"}
{"Action":"output","Package":"example.com/a","Output":"ok  \texample.com/a\t0.01s\n"}
{"Action":"pass","Package":"example.com/a"}
{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    bad_test.go:7: got 1, want 2\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Output":"FAIL\texample.com/b\t0.01s\n"}
{"Action":"fail","Package":"example.com/b"}
{"Action":"build-output","ImportPath":"example.com/c","Output":"c.go:3:1: syntax error\n"}
go: downloading example.com/d v1.0.0
`

func TestReport(t *testing.T) {
	var out strings.Builder
	r := newReport(&out)
	if err := r.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	want := "ok  \texample.com/a\t0.01s\n" +
		"    bad_test.go:7: got 1, want 2\n--- FAIL: TestBad (0.00s)\n" +
		"FAIL\texample.com/b\t0.01s\n" +
		"c.go:3:1: syntax error\n" +
		"go: downloading example.com/d v1.0.0\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	sum := r.summary()
	wantSum := "tests: 1 passed, 1 failed, 2 skipped: example.com/a TestBrowser (no Chromium found (set CI to fail instead)); " +
		"example.com/a TestSuite/nats (no reason given)"
	if sum != wantSum {
		t.Errorf("summary:\n%s\nwant:\n%s", sum, wantSum)
	}
	if strings.Contains(sum, "\n") {
		t.Error("the summary is more than one line")
	}
}

func TestReportNothingSkipped(t *testing.T) {
	r := newReport(&strings.Builder{})
	if err := r.read(strings.NewReader(`{"Action":"pass","Package":"p","Test":"TestA"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if got := r.summary(); got != "tests: 1 passed, 0 failed, 0 skipped; nothing skipped" {
		t.Fatalf("summary %q", got)
	}
}

// A package whose binary timed out: the tests running then get the panic's
// output and no event of their own; they are shown and counted as failed.
func TestReportUnfinished(t *testing.T) {
	const timedOut = `{"Action":"run","Package":"p","Test":"TestSlow"}
{"Action":"output","Package":"p","Test":"TestSlow","Output":"=== RUN   TestSlow\n"}
{"Action":"run","Package":"p","Test":"TestSlow/inner"}
{"Action":"output","Package":"p","Test":"TestSlow/inner","Output":"=== RUN   TestSlow/inner\n"}
{"Action":"output","Package":"p","Test":"TestSlow/inner","Output":"panic: test timed out after 2s\n"}
{"Action":"output","Package":"p","Test":"TestSlow/inner","Output":"\trunning tests:\n"}
{"Action":"run","Package":"q","Test":"TestElsewhere"}
{"Action":"output","Package":"p","Output":"FAIL\tp\t2.016s\n"}
{"Action":"fail","Package":"p"}
`
	var out strings.Builder
	r := newReport(&out)
	if err := r.read(strings.NewReader(timedOut)); err != nil {
		t.Fatal(err)
	}
	want := "FAIL\tp\t2.016s\n" +
		"--- UNFINISHED: TestSlow (running when p failed)\n" +
		"panic: test timed out after 2s\n\trunning tests:\n" +
		"--- UNFINISHED: TestSlow/inner (running when p failed)\n"
	if out.String() != want {
		t.Errorf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	if got := r.summary(); got != "tests: 0 passed, 2 failed, 0 skipped; nothing skipped" {
		t.Errorf("summary %q", got)
	}
}
