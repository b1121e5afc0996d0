package httpapi

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
)

// DefaultMaxBodyBytes is the largest request body accepted unless
// configured otherwise (REVIEWLEDGER_MAX_BODY_BYTES).
const DefaultMaxBodyBytes = 4 << 20

// Config tunes the HTTP server. Call New with it; New fills the defaults and
// validates it.
type Config struct {
	// Tokens are the bearer tokens allowed in (REVIEWLEDGER_TOKENS, parsed
	// with ParseTokens).
	Tokens []Token
	// MaxBodyBytes is the largest request body accepted; larger ones are
	// answered 413 before anything is decoded. Default 4 MiB.
	MaxBodyBytes int64
	// ClaimLease is how long a moderator's claim on a manual-queue item
	// lasts. Default 10 minutes.
	ClaimLease time.Duration
	// QueueHeartbeat is how often a quiet GET /v1/manual-queue/events
	// stream sends a heartbeat comment (QueueStreamHeartbeat when 0).
	QueueHeartbeat time.Duration
	// MaxInFlight is the admission ceiling: while the engine has this many
	// reviews in flight, new submissions are answered 429. Zero means no
	// ceiling.
	MaxInFlight int
	// RetryAfter is the Retry-After sent with 429. Default 1s.
	RetryAfter time.Duration
	// Classes are the policy's content classes (domain.Policy.Names). When
	// set, a content_class query parameter naming another class is answered
	// 422 unknown-class, as submit answers it; when empty, any class is
	// looked up and an unknown one finds nothing.
	Classes []string

	// Server timeouts. Defaults: read header 5s, read 30s, write 30s,
	// idle 120s.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// ShutdownTimeout bounds the graceful shutdown of Run. Default 10s.
	ShutdownTimeout time.Duration

	// Registry receives the server's metrics and is served on /metrics.
	// Default: a new registry.
	Registry *prometheus.Registry
	// Logger receives request and error logs. Default slog.Default().
	Logger *slog.Logger
	// Tracer makes the spans of moderators' decisions; default the global
	// otel.GetTracerProvider(). A caller's W3C traceparent is accepted on
	// every route.
	Tracer trace.TracerProvider
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.QueueHeartbeat <= 0 {
		c.QueueHeartbeat = QueueStreamHeartbeat
	}
	if c.ClaimLease == 0 {
		c.ClaimLease = 10 * time.Minute
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	defaults := []struct {
		d *time.Duration
		v time.Duration
	}{
		{&c.ReadHeaderTimeout, 5 * time.Second},
		{&c.ReadTimeout, 30 * time.Second},
		{&c.WriteTimeout, 30 * time.Second},
		{&c.IdleTimeout, 120 * time.Second},
		{&c.ShutdownTimeout, 10 * time.Second},
	}
	for _, d := range defaults {
		if *d.d == 0 {
			*d.d = d.v
		}
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the first setting at fault.
func (c *Config) Validate() error {
	bad := func(setting, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", setting, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	switch {
	case c.MaxBodyBytes < 0:
		return bad("REVIEWLEDGER_MAX_BODY_BYTES", "must be positive, got %d", c.MaxBodyBytes)
	case c.ClaimLease < 0:
		return bad("claim lease", "must be positive, got %s", c.ClaimLease)
	case c.MaxInFlight < 0:
		return bad("max in-flight", "must not be negative, got %d", c.MaxInFlight)
	case c.RetryAfter < 0:
		return bad("retry-after", "must be positive, got %s", c.RetryAfter)
	}
	for _, d := range []struct {
		name string
		d    time.Duration
	}{
		{"read header timeout", c.ReadHeaderTimeout}, {"read timeout", c.ReadTimeout},
		{"write timeout", c.WriteTimeout}, {"idle timeout", c.IdleTimeout}, {"shutdown timeout", c.ShutdownTimeout},
	} {
		if d.d < 0 {
			return bad(d.name, "must be positive, got %s", d.d)
		}
	}
	for i, class := range c.Classes {
		if class == "" {
			return bad("classes", "entry %d is empty", i+1)
		}
	}
	return validateTokens(c.Tokens)
}
