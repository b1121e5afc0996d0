package provider

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Standard Webhooks header names.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// SignatureTolerance is how far a callback's timestamp may be from now.
const SignatureTolerance = 5 * time.Minute

// ErrInvalidSignature is returned for a callback whose signature is
// missing, does not verify, or whose timestamp is out of tolerance.
var ErrInvalidSignature = errors.New("invalid webhook signature")

// ErrInvalidSecret is returned for a secret that is not "whsec_" followed by
// base64.
var ErrInvalidSecret = errors.New("invalid webhook secret")

// Signer signs and verifies callbacks as the Standard Webhooks
// specification describes: HMAC-SHA256 over "<id>.<timestamp>.<body>",
// keyed with the base64-decoded secret after its "whsec_" prefix.
type Signer struct {
	key []byte
}

// NewSigner parses a secret "whsec_<base64>". The prefix is optional, as in
// the specification's reference libraries.
func NewSigner(secret string) (*Signer, error) {
	raw := strings.TrimPrefix(secret, "whsec_")
	if raw == "" {
		return nil, fmt.Errorf("webhook secret is empty: %w", ErrInvalidSecret)
	}
	key, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return nil, fmt.Errorf("webhook secret is not base64 after whsec_: %w", ErrInvalidSecret)
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("webhook secret key is empty: %w", ErrInvalidSecret)
	}
	return &Signer{key: key}, nil
}

// Sign returns the webhook-signature value for a message.
func (s *Signer) Sign(id string, ts time.Time, body []byte) string {
	return "v1," + base64.StdEncoding.EncodeToString(s.mac(id, strconv.FormatInt(ts.Unix(), 10), body))
}

// SignHeader sets the three Standard Webhooks headers on h.
func (s *Signer) SignHeader(h http.Header, id string, ts time.Time, body []byte) {
	h.Set(HeaderWebhookID, id)
	h.Set(HeaderWebhookTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderWebhookSignature, s.Sign(id, ts, body))
}

func (s *Signer) mac(id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks the headers of a callback received at now and returns its
// webhook-id. Every failure matches ErrInvalidSignature; the message names
// the header at fault.
func (s *Signer) Verify(h http.Header, body []byte, now time.Time) (string, error) {
	id := h.Get(HeaderWebhookID)
	tsText := h.Get(HeaderWebhookTimestamp)
	sigs := h.Get(HeaderWebhookSignature)
	switch {
	case id == "":
		return "", fmt.Errorf("missing %s: %w", HeaderWebhookID, ErrInvalidSignature)
	case tsText == "":
		return "", fmt.Errorf("missing %s: %w", HeaderWebhookTimestamp, ErrInvalidSignature)
	case sigs == "":
		return "", fmt.Errorf("missing %s: %w", HeaderWebhookSignature, ErrInvalidSignature)
	}
	ts, err := strconv.ParseInt(tsText, 10, 64)
	if err != nil {
		return "", fmt.Errorf("%s is not a Unix time: %w", HeaderWebhookTimestamp, ErrInvalidSignature)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > SignatureTolerance || d < -SignatureTolerance {
		return "", fmt.Errorf("%s is more than %s off: %w", HeaderWebhookTimestamp, SignatureTolerance, ErrInvalidSignature)
	}
	want := s.mac(id, tsText, body)
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		got, err := base64.StdEncoding.DecodeString(value)
		if err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", fmt.Errorf("%s does not verify: %w", HeaderWebhookSignature, ErrInvalidSignature)
}

// NewSecret returns a fresh random secret, "whsec_" and 32 random bytes in
// base64, for a process that signs its own callbacks (the simulator) when
// no REVIEWLEDGER_CALLBACK_SECRET is configured.
func NewSecret() string {
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// CallbackBody is the JSON body of a findings callback (docs/contracts.md, section 4).
type CallbackBody struct {
	ReviewID string   `json:"review_id"`
	Attempt  int      `json:"attempt"`
	State    string   `json:"state"`
	Reasons  []string `json:"reasons"`
}
