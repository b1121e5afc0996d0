package httpapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/reviewledger/reviewledger/domain"
)

// TestSubmitReviewsExactlyWhatWasSent: a body that different readers could
// read differently, or whose content the decoder would alter, is refused
// with a 400 naming the member.
func TestSubmitReviewsExactlyWhatWasSent(t *testing.T) {
	h := newHarness(t)
	const head = `{"review_id":"r1","content_class":"caption_suggestion",`
	for _, tc := range []struct {
		name, body, field string
	}{
		{"invalid UTF-8 in content", head + "\"content\":\"caf\xe9\"}", "content"},
		{"a lone high surrogate", head + `"content":"a\ud800b"}`, "content"},
		{"a lone low surrogate", head + `"content":"\udc00"}`, "content"},
		{"a high surrogate at the end", head + `"content":"\ud83d"}`, "content"},
		{"two high surrogates", head + `"content":"\ud83d\ud83d"}`, "content"},
		{"review_id twice", `{"review_id":"r1","review_id":"r2","content_class":"caption_suggestion","content":"x"}`, "review_id"},
		{"content twice", head + `"content":"x","content":"y"}`, "content"},
		{"an unknown member twice", head + `"content":"x","note":1,"note":2}`, "note"},
		{"invalid UTF-8 in an unknown member", head + "\"content\":\"x\",\"extra\":\"\xff\"}", "extra"},
		{"invalid UTF-8 in a name", head + "\"content\":\"x\",\"\xff\":1}", "body"},
		{"invalid UTF-8 in content_class", "{\"review_id\":\"r1\",\"content_class\":\"caption\xff\",\"content\":\"x\"}", "content_class"},
		{"a lone surrogate in content_type", head + `"content_type":"text/plain; x=\ud800","content":"x"}`, "content_type"},
		{"an unknown encoding", head + `"content":"eA==","content_encoding":"hex"}`, "content_encoding"},
		{"base64 that is not", head + `"content":"not base64!","content_encoding":"base64"}`, "content"},
		{"base64 with bad padding bits", head + `"content":"eB==","content_encoding":"base64"}`, "content"},
		{"base64 of an object", head + `"content":{"a":1},"content_encoding":"base64"}`, "content"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantProblem(t, h.do("POST", "/v1/reviews", submitterToken, tc.body), http.StatusBadRequest, "invalid-request", tc.field)
			if _, err := h.ledger.Load(context.Background(), "r1"); err == nil {
				t.Fatal("the refused submission was stored")
			}
		})
	}

	// Names match exactly: REVIEW_ID is an unknown member, not review_id.
	if rec := h.do("POST", "/v1/reviews", submitterToken, `{"REVIEW_ID":"r2","review_id":"r1","content_class":"caption_suggestion","content":"x","Content":"y"}`); rec.Code != http.StatusAccepted {
		t.Fatalf("exact names: %d %s", rec.Code, rec.Body)
	}
	if _, err := h.ledger.Load(context.Background(), "r2"); err == nil {
		t.Fatal("REVIEW_ID was taken for review_id")
	}
	wantDigest(t, h, "r1", []byte("x"))

	// A surrogate pair is one character, encoded as UTF-8.
	if rec := h.do("POST", "/v1/reviews", submitterToken, `{"review_id":"emoji","content_class":"caption_suggestion","content":"\ud83d\ude00"}`); rec.Code != http.StatusAccepted {
		t.Fatalf("surrogate pair: %d %s", rec.Code, rec.Body)
	}
	wantDigest(t, h, "emoji", []byte("😀"))
}

// TestSubmitBase64Content: content_encoding base64 carries bytes that are
// not UTF-8; the digest is over the decoded bytes, so the same bytes sent
// as text are the same review.
func TestSubmitBase64Content(t *testing.T) {
	h := newHarness(t)
	binary := []byte{0x89, 'P', 'N', 'G', 0x00, 0xff, 0xfe, '\n'}
	body, _ := json.Marshal(map[string]string{"review_id": "bin", "content_class": "caption_suggestion", "content_type": "image/png",
		"content": base64.StdEncoding.EncodeToString(binary), "content_encoding": "base64"})
	if rec := h.do("POST", "/v1/reviews", submitterToken, string(body)); rec.Code != http.StatusAccepted {
		t.Fatalf("binary: %d %s", rec.Code, rec.Body)
	}
	wantDigest(t, h, "bin", binary)
	if rec := h.do("POST", "/v1/reviews", submitterToken, string(body)); rec.Code != http.StatusOK {
		t.Fatalf("binary again: %d %s", rec.Code, rec.Body)
	}

	text, _ := json.Marshal(map[string]string{"review_id": "txt", "content_class": "caption_suggestion",
		"content": base64.StdEncoding.EncodeToString([]byte("héllo")), "content_encoding": "base64"})
	if rec := h.do("POST", "/v1/reviews", submitterToken, string(text)); rec.Code != http.StatusAccepted {
		t.Fatalf("text as base64: %d %s", rec.Code, rec.Body)
	}
	if rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON("txt", "caption_suggestion", "héllo")); rec.Code != http.StatusOK {
		t.Fatalf("the same bytes as a JSON string: %d %s, want 200 (the same review)", rec.Code, rec.Body)
	}

	req, err := decodeSubmit(body)
	if err != nil || !bytes.Equal(req.Content, binary) {
		t.Fatalf("decodeSubmit: %v, content %x, want %x", err, req.Content, binary)
	}
}

func wantDigest(t *testing.T, h *harness, id string, content []byte) {
	t.Helper()
	hist, err := h.ledger.History(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	sub, ok := hist.Events[0].Event.(domain.Submitted)
	if !ok {
		t.Fatalf("review %s: first event %T", id, hist.Events[0].Event)
	}
	sum := sha256.Sum256(content)
	if want := "sha256:" + hex.EncodeToString(sum[:]); sub.PayloadDigest != want {
		t.Fatalf("review %s: digest %s, want %s (of %q)", id, sub.PayloadDigest, want, content)
	}
}

// TestSubmitNestedContentAsSent: what the strict rules do not ask of is
// read as it always was (docs/api.md): a content object or array is
// reviewed as sent, byte for byte, whatever names it repeats or surrogate
// escapes it holds, and an unknown member may hold either too.
func TestSubmitNestedContentAsSent(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct {
		name, id, members, content string
	}{
		// (a) a name twice inside content
		{"a name twice in a content object", "dup-object", ``, `{"a" : 1, "a":[2, {"b":0,"b":{}}] }`},
		{"a name twice in a content array", "dup-array", ``, `[{"k":"x","k":"y"}]`},
		// (b) unpaired surrogate escapes inside content and in unknown members
		{"a lone surrogate in a content object", "sur-object", ``, `{"a":"\ud800","\udc00":"b"}`},
		{"a lone surrogate in a content array", "sur-array", ``, `["x\udc00y", "\ud83d"]`},
		{"a lone surrogate in an unknown member", "sur-unknown", `"extra":"\ud800","more":["\udc00"],"obj":{"n":1,"n":2},`, `"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"review_id":"` + tc.id + `","content_class":"caption_suggestion",` + tc.members + `"content":` + tc.content + `}`
			if rec := h.do("POST", "/v1/reviews", submitterToken, body); rec.Code != http.StatusAccepted {
				t.Fatalf("%s: %d %s", body, rec.Code, rec.Body)
			}
			want := []byte(tc.content)
			if tc.content[0] == '"' {
				want = want[1 : len(want)-1]
			}
			req, err := decodeSubmit([]byte(body))
			if err != nil || !bytes.Equal(req.Content, want) {
				t.Fatalf("decodeSubmit: %v, content %q, want %q", err, req.Content, want)
			}
			wantDigest(t, h, tc.id, want)
		})
	}
}
