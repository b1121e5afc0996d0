package provider

import (
	"encoding/base64"
	"errors"
	"net/http"
	"testing"
	"time"
)

var testSecret = "whsec_" + base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef"))

func TestSignerVerify(t *testing.T) {
	t.Parallel()
	s, err := NewSigner(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"review_id":"r1","attempt":1,"state":"accepted","reasons":[]}`)
	signed := func() http.Header {
		h := http.Header{}
		s.SignHeader(h, "msg_1", now, body)
		return h
	}
	if id, err := s.Verify(signed(), body, now.Add(time.Minute)); err != nil || id != "msg_1" {
		t.Fatalf("Verify = %q, %v; want msg_1, nil", id, err)
	}
	other, _ := NewSigner("whsec_" + base64.StdEncoding.EncodeToString([]byte("another key entirely")))
	cases := map[string]struct {
		h    func() http.Header
		body []byte
		at   time.Time
	}{
		"body changed":      {signed, []byte(`{"review_id":"r1","attempt":1,"state":"rejected","reasons":[]}`), now},
		"stale":             {signed, body, now.Add(SignatureTolerance + time.Second)},
		"from the future":   {signed, body, now.Add(-SignatureTolerance - time.Second)},
		"missing id":        {func() http.Header { h := signed(); h.Del(HeaderWebhookID); return h }, body, now},
		"missing timestamp": {func() http.Header { h := signed(); h.Del(HeaderWebhookTimestamp); return h }, body, now},
		"missing signature": {func() http.Header { h := signed(); h.Del(HeaderWebhookSignature); return h }, body, now},
		"other id":          {func() http.Header { h := signed(); h.Set(HeaderWebhookID, "msg_2"); return h }, body, now},
		"bad timestamp":     {func() http.Header { h := signed(); h.Set(HeaderWebhookTimestamp, "soon"); return h }, body, now},
		"other key": {func() http.Header {
			h := http.Header{}
			other.SignHeader(h, "msg_1", now, body)
			return h
		}, body, now},
		"wrong version": {func() http.Header {
			h := signed()
			h.Set(HeaderWebhookSignature, "v2,"+h.Get(HeaderWebhookSignature)[3:])
			return h
		}, body, now},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := s.Verify(c.h(), c.body, c.at); !errors.Is(err, ErrInvalidSignature) {
				t.Fatalf("Verify = %v, want ErrInvalidSignature", err)
			}
		})
	}
	t.Run("one of several signatures", func(t *testing.T) {
		h := signed()
		h.Set(HeaderWebhookSignature, "v1,AAAA "+h.Get(HeaderWebhookSignature))
		if _, err := s.Verify(h, body, now); err != nil {
			t.Fatalf("Verify = %v", err)
		}
	})
}

func TestNewSignerRefusesBadSecrets(t *testing.T) {
	t.Parallel()
	if _, err := NewSigner(NewSecret()); err != nil {
		t.Errorf("NewSecret makes an unusable secret: %v", err)
	}
	for _, secret := range []string{"", "whsec_", "whsec_not base64!"} {
		if _, err := NewSigner(secret); !errors.Is(err, ErrInvalidSecret) {
			t.Errorf("NewSigner(%q) = %v, want ErrInvalidSecret", secret, err)
		}
	}
}
