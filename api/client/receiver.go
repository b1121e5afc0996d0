package client

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Webhook event types.
const (
	// EventDecided: the review is accepted or rejected, for good.
	EventDecided = "review.decided"
	// EventManualReview: the review waits for a moderator; an
	// EventDecided follows.
	EventManualReview = "review.manual_review"
)

// Event is a decision webhook.
type Event struct {
	// ID is the webhook-id: the same on every redelivery of the event.
	ID string
	// Type is EventDecided or EventManualReview (more may be added:
	// ignore the others).
	Type string
	// Timestamp is when the change was recorded in the ledger.
	Timestamp time.Time
	// Review is the review right after the change; its Version orders a
	// review's events.
	Review Review
}

// ErrInvalidSignature: a webhook whose Standard Webhooks headers are
// missing, do not verify, or whose timestamp is out of tolerance.
var ErrInvalidSignature = errors.New("invalid webhook signature")

// ReceiverConfig configures a Receiver.
type ReceiverConfig struct {
	// Secret is REVIEWLEDGER_NOTIFY_SECRET: "whsec_" and base64.
	Secret string
	// Seen remembers the webhooks handled, to drop redeliveries; a
	// MemorySeen keeping them 48 hours when nil. Share one store between
	// the replicas of a receiver for them to drop each other's.
	Seen SeenStore
	// Tolerance is how far a webhook's timestamp may be from now (default
	// 5 minutes, as the specification says).
	Tolerance time.Duration
	// MaxBodyBytes bounds a webhook's body (default 1 MiB).
	MaxBodyBytes int64
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// Receiver verifies and de-duplicates decision webhooks.
type Receiver struct {
	key  []byte
	cfg  ReceiverConfig
	busy sync.Map // webhook-ids being handled now
}

// NewReceiver returns a receiver; the error names the field at fault and
// never quotes the secret.
func NewReceiver(cfg ReceiverConfig) (*Receiver, error) {
	b64, ok := strings.CutPrefix(cfg.Secret, "whsec_")
	if !ok {
		return nil, fmt.Errorf("client: Secret: must start with whsec_: %w", ErrInvalidConfig)
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("client: Secret: the part after whsec_ is not base64: %w", ErrInvalidConfig)
	}
	if cfg.Seen == nil {
		cfg.Seen = NewMemorySeen(48 * time.Hour)
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 5 * time.Minute
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Tolerance < 0 || cfg.MaxBodyBytes < 0 {
		return nil, fmt.Errorf("client: Tolerance and MaxBodyBytes must not be negative: %w", ErrInvalidConfig)
	}
	return &Receiver{key: key, cfg: cfg}, nil
}

// Verify checks a webhook's signature and timestamp and returns its
// webhook-id. Errors match ErrInvalidSignature; the message names the
// header at fault.
func (r *Receiver) Verify(h http.Header, body []byte) (string, error) {
	id, ts, sigs := h.Get("webhook-id"), h.Get("webhook-timestamp"), h.Get("webhook-signature")
	switch {
	case id == "":
		return "", fmt.Errorf("missing webhook-id: %w", ErrInvalidSignature)
	case ts == "":
		return "", fmt.Errorf("missing webhook-timestamp: %w", ErrInvalidSignature)
	case sigs == "":
		return "", fmt.Errorf("missing webhook-signature: %w", ErrInvalidSignature)
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return "", fmt.Errorf("webhook-timestamp is not a Unix time: %w", ErrInvalidSignature)
	}
	if d := r.cfg.Now().Sub(time.Unix(unix, 0)); d > r.cfg.Tolerance || d < -r.cfg.Tolerance {
		return "", fmt.Errorf("webhook-timestamp is more than %s off: %w", r.cfg.Tolerance, ErrInvalidSignature)
	}
	m := hmac.New(sha256.New, r.key)
	m.Write([]byte(id + "." + ts + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, sig := range strings.Fields(sigs) {
		version, value, ok := strings.Cut(sig, ",")
		if !ok || version != "v1" {
			continue
		}
		if got, err := base64.StdEncoding.DecodeString(value); err == nil && hmac.Equal(got, want) {
			return id, nil
		}
	}
	return "", fmt.Errorf("webhook-signature does not verify: %w", ErrInvalidSignature)
}

// body is a webhook's JSON.
type body struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      Review    `json:"data"`
}

// Handler returns the http.Handler of the webhook URL. For each POST it
// verifies the signature (401 otherwise), drops a webhook already handled
// (200 without calling handle), and calls handle with the event: when
// handle returns nil the webhook is remembered and answered 204, when it
// fails it is answered 500, and reviewledger sends it again later. A
// webhook being handled when its redelivery comes is answered 503 with
// Retry-After, so that it is handled once even then. Answer quickly: a
// handle outlasting REVIEWLEDGER_NOTIFY_TIMEOUT (10s) counts as a failed
// attempt.
func (r *Receiver) Handler(handle func(ctx context.Context, e Event) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "webhooks are POSTed", http.StatusMethodNotAllowed)
			return
		}
		raw, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.cfg.MaxBodyBytes))
		if err != nil {
			http.Error(w, "body too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		id, err := r.Verify(req.Header, raw)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var b body
		if err := json.Unmarshal(raw, &b); err != nil {
			http.Error(w, "not a webhook body", http.StatusBadRequest)
			return
		}
		if _, busy := r.busy.LoadOrStore(id, true); busy {
			w.Header().Set("Retry-After", "1")
			http.Error(w, "this webhook is being handled", http.StatusServiceUnavailable)
			return
		}
		defer r.busy.Delete(id)
		ctx := req.Context()
		seen, err := r.cfg.Seen.Seen(ctx, id)
		if err != nil {
			http.Error(w, "seen store unavailable", http.StatusInternalServerError)
			return
		}
		if seen {
			w.WriteHeader(http.StatusOK) // a redelivery: handled before
			return
		}
		if err := handle(ctx, Event{ID: id, Type: b.Type, Timestamp: b.Timestamp, Review: b.Data}); err != nil {
			http.Error(w, "not handled", http.StatusInternalServerError)
			return
		}
		if err := r.cfg.Seen.Mark(ctx, id); err != nil {
			// Handled, but a redelivery would be handled again: say so.
			http.Error(w, "handled; seen store unavailable", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
