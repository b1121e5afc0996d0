package provider

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"", "0", "3", "-1", "99999999999999999999", "Wed, 21 Oct 2015 07:28:00 GMT", "soon"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, v string) {
		if d := retryAfter(v, now); d < 0 {
			t.Fatalf("retryAfter(%q) = %s, negative", v, d)
		}
	})
}

// Whatever the headers, Verify never panics and never accepts a signature
// made with another key.
func FuzzVerify(f *testing.F) {
	f.Add("msg_1", "1800000000", "v1,AAAA", []byte(`{}`))
	f.Add("", "", "", []byte(nil))
	f.Add("id", "1800000000", "v1,"+"A", []byte("x"))
	s, _ := NewSigner(testSecret)
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, id, ts, sig string, body []byte) {
		h := http.Header{}
		h.Set(HeaderWebhookID, id)
		h.Set(HeaderWebhookTimestamp, ts)
		h.Set(HeaderWebhookSignature, sig)
		_, err := s.Verify(h, body, now)
		if err != nil {
			if !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("Verify error %v does not match ErrInvalidSignature", err)
			}
			return
		}
		n, perr := strconv.ParseInt(ts, 10, 64)
		if perr != nil || !strings.Contains(sig, s.Sign(id, time.Unix(n, 0), body)) {
			t.Fatalf("accepted a signature it did not make: id %q ts %q sig %q", id, ts, sig)
		}
	})
}
