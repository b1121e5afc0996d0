package httpapi

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/contentaccess"
)

// TestContentAccessRecorded: every read of content is recorded before it
// is served, with who, when and through what; reads the role table
// refuses are not reads; auditors list a review's reads and export them.
func TestContentAccessRecorded(t *testing.T) {
	w := newWithRunner(t)
	ctx := context.Background()
	for _, id := range []string{"ca-1", "ca-2", "ca-unread"} {
		body := `{"review_id":"` + id + `","content_class":"caption_suggestion","content_type":"text/plain","content":"secret words"}`
		if rec := w.do("POST", "/v1/reviews", submitterToken, body); rec.Code != http.StatusAccepted {
			t.Fatalf("submit: %d %s", rec.Code, rec.Body)
		}
	}
	before := time.Now().UTC()
	for _, read := range []struct{ token, id string }{{moderatorToken, "ca-1"}, {adminToken, "ca-1"}, {moderator2, "ca-2"}} {
		if rec := w.do("GET", "/v1/reviews/"+read.id+"/content", read.token, "", "X-Request-Id", "read-"+read.id); rec.Code != http.StatusOK {
			t.Fatalf("read: %d %s", rec.Code, rec.Body)
		}
	}
	for _, tok := range []string{auditorToken, submitterToken} {
		wantProblem(t, w.do("GET", "/v1/reviews/ca-1/content", tok, ""), http.StatusForbidden, "forbidden", "")
	}
	if _, err := w.pool.Exec(ctx, `DELETE FROM review_payload WHERE review_id = 'ca-2'`); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, w.do("GET", "/v1/reviews/ca-2/content", moderatorToken, ""), http.StatusGone, "content-purged", "")

	rec := w.do("GET", "/v1/reviews/ca-1/content-access", auditorToken, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("content-access: %d %s", rec.Code, rec.Body)
	}
	v := decode[contentAccessView](t, rec)
	if v.ReviewID != "ca-1" || len(v.Accesses) != 2 {
		t.Fatalf("accesses %+v", v)
	}
	a := v.Accesses[0]
	if a.Subject != "mona" || a.DisplayName != "mona" || a.Actor != "mona" || a.Role != "moderator" || a.Via != ViaToken ||
		a.Credential != "mona" || a.RequestID != "read-ca-1" || a.Outcome != contentaccess.OutcomeServed || a.At.Before(before.Add(-time.Second)) {
		t.Fatalf("first access %+v", a)
	}
	if v.Accesses[1].Subject != "root" || v.Accesses[1].Role != "admin" {
		t.Fatalf("second access %+v", v.Accesses[1])
	}
	wantKeys(t, keys(t, rec.Body.Bytes()), "review_id", "accesses")
	two := decode[contentAccessView](t, w.do("GET", "/v1/reviews/ca-2/content-access", auditorToken, ""))
	if len(two.Accesses) != 2 || two.Accesses[1].Outcome != contentaccess.OutcomePurged {
		t.Fatalf("ca-2 accesses %+v", two)
	}
	wantProblem(t, w.do("GET", "/v1/reviews/ca-1/content-access", moderatorToken, ""), http.StatusForbidden, "forbidden", "")
	wantProblem(t, w.do("GET", "/v1/reviews/nope/content-access", auditorToken, ""), http.StatusNotFound, "review-not-found", "")
	if rec := w.do("GET", "/v1/reviews/ca-unread/content-access", adminToken, ""); rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"accesses":[]`) {
		t.Fatalf("a review nobody read: %d %s", rec.Code, rec.Body)
	}

	// The export: JSON lines by default, CSV on request, a time range.
	rec = w.do("GET", "/v1/content-access", auditorToken, "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != MIMEJSONLines {
		t.Fatalf("export: %d %q %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body)
	}
	lines := strings.Split(strings.TrimSuffix(rec.Body.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("export lines %q", lines)
	}
	var last contentaccess.Access
	if err := json.Unmarshal([]byte(lines[3]), &last); err != nil || last.ReviewID != "ca-2" || last.Outcome != contentaccess.OutcomePurged {
		t.Fatalf("last line %q: %v", lines[3], err)
	}
	rec = w.do("GET", "/v1/content-access?format=csv&from="+before.Add(-time.Minute).Format(time.RFC3339Nano), auditorToken, "")
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != MIMECSV {
		t.Fatalf("csv export: %d %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	rows, err := csv.NewReader(strings.NewReader(rec.Body.String())).ReadAll()
	if err != nil || len(rows) != 5 || strings.Join(rows[0], ",") != strings.Join(contentaccess.Columns, ",") || rows[1][0] != "ca-1" || rows[1][2] != "mona" {
		t.Fatalf("csv rows %q: %v", rows, err)
	}
	// An empty range is a header alone, or nothing.
	old := "from=2020-01-01T00:00:00Z&to=2020-01-02T00:00:00Z"
	if rec := w.do("GET", "/v1/content-access?format=csv&"+old, auditorToken, ""); rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != strings.Join(contentaccess.Columns, ",") {
		t.Fatalf("empty csv: %d %q", rec.Code, rec.Body)
	}
	if rec := w.do("GET", "/v1/content-access?"+old, auditorToken, ""); rec.Code != http.StatusOK || rec.Body.Len() != 0 {
		t.Fatalf("empty jsonl: %d %q", rec.Code, rec.Body)
	}
	for _, tc := range []struct{ query, field string }{
		{"from=yesterday", "from"}, {"to=1700000000", "to"}, {"format=xml", "format"},
		{"from=2026-01-02T00:00:00Z&to=2026-01-01T00:00:00Z", "from"},
	} {
		wantProblem(t, w.do("GET", "/v1/content-access?"+tc.query, auditorToken, ""), http.StatusBadRequest, "invalid-request", tc.field)
	}
	wantProblem(t, w.do("GET", "/v1/content-access", moderatorToken, ""), http.StatusForbidden, "forbidden", "")

	// A read that cannot be recorded is not served.
	if _, err := w.pool.Exec(ctx, `ALTER TABLE content_access RENAME TO content_access_gone`); err != nil {
		t.Fatal(err)
	}
	rec = w.do("GET", "/v1/reviews/ca-1/content", moderatorToken, "")
	wantProblem(t, rec, http.StatusInternalServerError, "internal", "")
	if strings.Contains(rec.Body.String(), "secret words") {
		t.Fatalf("content served unrecorded: %s", rec.Body)
	}
}

// TestContentAccessAppendOnly: a recorded read cannot be changed.
func TestContentAccessAppendOnly(t *testing.T) {
	w := newWithRunner(t)
	ctx := context.Background()
	db := contentaccess.New(w.pool)
	if err := db.Record(ctx, contentaccess.Access{ReviewID: "r", At: time.Now(), Subject: "s", DisplayName: "d", Actor: "a", Role: "moderator", Via: ViaToken, Credential: "c", RequestID: "q", Outcome: contentaccess.OutcomeServed}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.pool.Exec(ctx, `UPDATE content_access SET subject = 'someone else'`); err == nil || !strings.Contains(err.Error(), "never updated") {
		t.Fatalf("update: %v", err)
	}
}
