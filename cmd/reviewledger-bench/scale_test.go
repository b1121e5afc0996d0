package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/migrations/dbtest"
	"github.com/reviewledger/reviewledger/projections"
)

// buildReviewledger builds the service's binary for a test that runs it.
func buildReviewledger(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the reviewledger binary; skipped with -short")
	}
	bin := filepath.Join(t.TempDir(), "reviewledger")
	out, err := exec.Command("go", "build", "-o", bin, "../reviewledger").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// The scale run, on a small ledger, prints every figure with its target
// and verdict, and passes its correctness checks: the grown ledger is
// intact by audit verify, its rebuilt read models equal the live ones,
// and the purge removes exactly the content past the retention.
func TestScaleRunPrintsEveryFigure(t *testing.T) {
	bin := buildReviewledger(t)
	sc, err := parseScaleFlags([]string{"-bin", bin, "-reviews", "2000", "-round", "300", "-clients", "8",
		"-pairs", "2",
		"-steady", "3s", "-samples", "3", "-timeout", "5m"})
	if err != nil {
		t.Fatal(err)
	}
	sc.database, sc.emptyDatabase = dbtest.URL(t), dbtest.URL(t)
	var out strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := runScale(ctx, sc, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	t.Log("\n" + text)
	verdict := `(ok|flat|BELOW TARGET.*)$`
	for _, figure := range []string{
		`growth \(the product's write path\) +2000 reviews, \d+ events`,
		`  final states +accepted \d+, manual_review 500, rejected \d+`,
		`projections catch-up at N \(all read models\) +\d+ events .* >= 100000/s +` + verdict,
		`  VACUUM \(ANALYZE\) after the growth +[\d.]+m?s$`,
		`bytes per review on disk, content excluded +\d+ B .*<= 1200 B +` + verdict,
		`bytes per review on disk, content included +\d+ B`,
		`  event +\d+ B/review`,
		`  statement profile +none: |  database time a review, empty → at N +[\d.]+ ms → [\d.]+ ms`,
		`  pair 2: empty, then at N +\d+/s p99 [\d.]+ms; \d+/s p99 [\d.]+ms`,
		`end to end at the empty ledger, median of 2 +\d+ reviews/s, p99 [\d.]+ms, serve \d+ MB`,
		`end to end at 2000 reviews, median of 2 +\d+ reviews/s, p99 [\d.]+ms, serve \d+ MB`,
		`  reviews/s at N / at the empty ledger +[\d.]+ +>= 0.9 +` + verdict,
		`  p99 at the empty ledger / at N +[\d.]+ +>= 0.9 +` + verdict,
		`manual queue +500 waiting`,
		`GET /v1/manual-queue p99, worst of 20 queries +[\d.]+ms +< 50.0ms +` + verdict,
		`GET /v1/slo and /v1/slo/series p99, worst of 7 queries +[\d.]+ms +< 100.0ms +` + verdict,
		`retention purge +\d+ rows in .*rows/s`,
		`  longest submit → decision meanwhile +[\d.]+ms .* < 100.0ms +` + verdict,
		`steady load at half the peak +\d+ reviews in 3s`,
		`  review_work +\d+ kB → \d+ kB .* flat +` + verdict,
		`  slo_minute +\d+ kB → \d+ kB .* flat +` + verdict,
		`  slo_latency_hour +\d+ kB → \d+ kB .* flat +` + verdict,
		fmt.Sprintf(`steady tables flat +\d+ of %d +<= \+10%% +`, len(steadyTables)) + verdict,
		`projections rebuild at N \(all read models\) +\d+ events .* >= 100000/s +` + verdict,
		`audit verify at N +\d+ reviews in .* >= 50000/s +` + verdict,
		`  VACUUM \(ANALYZE\) audit_anchor_page after it +[\d.]+m?s$`,
		`audit verify --review ID \(the whole command\) +p99 [\d.]+ms over 3 reviews +< 50.0ms +` + verdict,
		`  of which the process \(reviewledger version\) +p99 [\d.]+ms, median [\d.]+ms$`,
		`bytes per review on disk after audit verify, content excluded +\d+ B .*<= 1200 B +` + verdict,
	} {
		if !regexp.MustCompile(`(?m)^` + figure).MatchString(text) {
			t.Errorf("no line matching %q", figure)
		}
	}
	// The figure after the audit counts the anchor it left a review, in
	// pages; the one after the growth, before any audit, an empty table
	// (its index's first page).
	audited := regexp.MustCompile(`(?ms)^bytes per review on disk after audit verify, content excluded.*?^  audit_anchor_page +(\d+) B/review`).FindStringSubmatch(text)
	if audited == nil {
		t.Error("no audit_anchor_page line after the audit's bytes")
	} else if n, _ := strconv.Atoi(audited[1]); n < sha256.Size {
		t.Errorf("audit_anchor_page after the audit: %d B a review, want at least the hash an anchor holds (%d)", n, sha256.Size)
	}
	checks := regexp.MustCompile(`(?m)^checks passed: (.*)$`).FindStringSubmatch(text)
	if checks == nil {
		t.Fatal("no checks line")
	}
	for _, want := range []string{`purge removed all [1-9]\d* contents past the retention`,
		fmt.Sprintf(`projections rebuild equals the live read models \(%d tables`, len(projections.Tables())), `audit verify: \d+ reviews, \d+ events intact`} {
		if !regexp.MustCompile(want).MatchString(checks[1]) {
			t.Errorf("checks %q: none matches %q", checks[1], want)
		}
	}
}

// Bad flags of the scale command name the flag.
func TestScaleFlagsNameTheSetting(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-reviews", "10"}, "-reviews"},
		{[]string{"-days", "20"}, "-days"},
		{[]string{"-steady", "-1s"}, "-steady"},
		{[]string{"-pairs", "0"}, "-pairs"},
		{[]string{"-bin", "/nonexistent/reviewledger"}, "-bin"},
		{[]string{"-ids", "serial"}, "-ids"},
	} {
		_, err := parseScaleFlags(tc.args)
		if err == nil || !strings.HasPrefix(err.Error(), tc.want+":") {
			t.Errorf("parseScaleFlags(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}
