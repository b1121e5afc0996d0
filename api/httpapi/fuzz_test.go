package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"testing"
	"unicode/utf8"

	"github.com/reviewledger/reviewledger/domain"
)

// FuzzDecodeSubmit: the submit decoder never panics, accepts only valid
// submissions, and names the field of everything it refuses.
func FuzzDecodeSubmit(f *testing.F) {
	for _, s := range []string{
		`{"review_id":"r1","content_class":"caption_suggestion","content_type":"text/plain","content":"hello"}`,
		`{"review_id":"r1","content_class":"c","content":{"a":[1,2]}}`,
		`{"review_id":"","content_class":"c","content":"x"}`,
		`{"review_id":"a/b","content_class":"c","content":"x"}`,
		`{"review_id":7}`,
		`{"review_id":"r1","content_class":"c","content":null}`,
		`{"review_id":"r1","content_class":"c","content_type":"a/b; c=\"d\"","content":"\u00e9"}`,
		`[]`, `{`, ``, `null`, `{"review_id":"r1"} trailing`,
		`{"review_id":"r1","review_id":"r2","content_class":"c","content":"x"}`,
		`{"review_id":"r1","content_class":"c","content":"\ud800"}`,
		`{"review_id":"r1","content_class":"c","content":"\ud83d\ude00"}`,
		`{"review_id":"r1","content_class":"c","content":"AP8=","content_encoding":"base64"}`,
		"{\"review_id\":\"r1\",\"content_class\":\"c\",\"content\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeSubmit(body)
		if err != nil {
			var fe *domain.FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %v names no field", err)
			}
			if !errors.Is(err, ErrInvalidRequest) && !errors.Is(err, domain.ErrInvalidReviewID) {
				t.Fatalf("error %v is not a 400", err)
			}
			return
		}
		if domain.ValidateReviewID(req.ReviewID) != nil || req.ContentClass == "" || req.ContentType == "" || req.Content == nil {
			t.Fatalf("accepted an invalid submission %+v from %q", req, body)
		}
		// Nothing accepted was altered on the way in: the body was UTF-8
		// text, and so is every string the server read from it.
		if !utf8.Valid(body) || !utf8.ValidString(req.ReviewID+req.ContentClass+req.ContentType) {
			t.Fatalf("accepted text that is not UTF-8 from %q", body)
		}
		if !bytes.Contains(body, []byte("content_encoding")) && !utf8.Valid(req.Content) {
			t.Fatalf("content %q from %q is not what a JSON string holds", req.Content, body)
		}
		// A string content is what encoding/json reads from it.
		var members map[string]json.RawMessage
		if json.Unmarshal(body, &members) == nil && members["content_encoding"] == nil {
			if raw := members["content"]; len(raw) > 0 && raw[0] == '"' {
				var want string
				if err := json.Unmarshal(raw, &want); err != nil || string(req.Content) != want {
					t.Fatalf("content %q from %q; encoding/json reads %q (%v)", req.Content, body, want, err)
				}
			}
		}
	})
}

// FuzzDecodeDecision: the decision decoder never panics and never accepts
// a decision without expected_version or a valid state.
func FuzzDecodeDecision(f *testing.F) {
	for _, s := range []string{
		`{"state":"accepted","note":"ok","expected_version":3}`,
		`{"state":"rejected","expected_version":0}`,
		`{"state":"accepted"}`, `{"expected_version":-1}`, `{"expected_version":1e30}`, `{"state":1}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		d, err := decodeDecision(body)
		if err != nil {
			var fe *domain.FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("error %v names no field", err)
			}
			return
		}
		if d.ExpectedVersion == nil || !domain.Decision(d.State).Valid() {
			t.Fatalf("accepted %+v from %q", d, body)
		}
	})
}

var reviewIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// FuzzReviewIDPath: a review ID in the path is answered 400 exactly when
// it is not 1-128 characters of [A-Za-z0-9._:-], and otherwise looked up
// (404 here, as nothing exists).
func FuzzReviewIDPath(f *testing.F) {
	for _, s := range []string{"r1", "a.b_c:d-e", "a/b", "a b", "", "é", "..", "%2F", string(make([]byte, 129))} {
		f.Add(s)
	}
	h := newHarness(f)
	f.Fuzz(func(t *testing.T, id string) {
		h.t = t
		if id == "" || id == "." || id == ".." {
			t.Skip("not a single path segment")
		}
		rec := h.do("GET", "/v1/reviews/"+url.PathEscape(id), auditorToken, "")
		want := http.StatusNotFound
		if !reviewIDPattern.MatchString(id) {
			want = http.StatusBadRequest
		}
		if rec.Code != want {
			t.Fatalf("id %q: %d, want %d: %s", id, rec.Code, want, rec.Body)
		}
	})
}

// FuzzParseWindow: an accepted SLO window is positive and at most 366 days.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"1h", "7d", "90s", "366d", "367d", "-1h", "0s", "1.5d", "106751991167301d", "d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		d, err := parseWindow(q)
		if err != nil {
			var fe *domain.FieldError
			if !errors.As(err, &fe) || fe.Field != "window" {
				t.Fatalf("%q: error %v does not name window", q, err)
			}
			return
		}
		if d <= 0 || d > maxSLOWindow {
			t.Fatalf("%q accepted as %s", q, d)
		}
	})
}
