package notify

import (
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/eventstore"
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the setting.
var ErrInvalidConfig = errors.New("invalid notifier configuration")

// Where a notifier that never ran starts reading the ledger.
const (
	// FromNow starts at the ledger's end when the notifier first runs:
	// decisions made before it was configured are not sent.
	FromNow = "now"
	// FromStart starts at the beginning of the ledger: every decision
	// ever made is sent once.
	FromStart = "start"
)

// MaxConcurrency bounds Config.Concurrency.
const MaxConcurrency = 1024

// MinSecretBytes is the shortest signing key accepted.
const MinSecretBytes = 16

// Config configures a Notifier. The settings with an environment variable
// are named by it in Validate's errors.
type Config struct {
	// URL receives the webhooks (REVIEWLEDGER_NOTIFY_URL): http or https.
	URL string
	// Secret signs them (REVIEWLEDGER_NOTIFY_SECRET): "whsec_" and the
	// base64 of at least MinSecretBytes bytes.
	Secret string
	// Concurrency is how many deliveries are in flight at once, and so
	// the most connections held to the receiver
	// (REVIEWLEDGER_NOTIFY_CONCURRENCY, default 16).
	Concurrency int
	// Timeout bounds each attempt, from connecting to reading the answer
	// (REVIEWLEDGER_NOTIFY_TIMEOUT, default 10s).
	Timeout time.Duration
	// RetryFor is how long a delivery is retried before it is given up
	// (REVIEWLEDGER_NOTIFY_RETRY_FOR, default 24h); a redelivery opens a
	// new window.
	RetryFor time.Duration
	// BackoffInitial and BackoffMax shape the wait between attempts: it
	// doubles from BackoffInitial up to BackoffMax, and jitter takes up to
	// half of it off (REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL, default 5s;
	// REVIEWLEDGER_NOTIFY_BACKOFF_MAX, default 1h).
	BackoffInitial time.Duration
	BackoffMax     time.Duration
	// From is where a notifier that never ran starts: FromNow (default)
	// or FromStart (REVIEWLEDGER_NOTIFY_FROM).
	From string
	// Keep is how long delivered deliveries are kept before they are
	// deleted (REVIEWLEDGER_NOTIFY_KEEP, default 168h). Undelivered ones
	// are never deleted.
	Keep time.Duration

	// BatchSize is how many ledger events are read and turned into
	// deliveries in one transaction (default 1000).
	BatchSize int
	// PollInterval bounds every wait: for new events when the store does
	// not wake the notifier, for a redelivery asked through another
	// process, and between tries for the lock (default 2s).
	PollInterval time.Duration
	// StatsInterval is how often the backlog gauges are measured
	// (default 5s).
	StatsInterval time.Duration
	// RetryDelay is the pause after the notifier failed, before it starts
	// again (default 2s).
	RetryDelay time.Duration

	// Pool holds notify_checkpoint and notify_delivery; required.
	Pool *pgxpool.Pool
	// Sessions is the pool whose connection settings the sender's
	// election connection uses (an advisory lock lives in a server
	// session, which a transaction pooler in front of Pool would not
	// keep); default Pool.
	Sessions *pgxpool.Pool
	// Store is the ledger's event store, read in global order; required.
	Store eventstore.Store
	// Histories reads reviews' histories (*ledger.Ledger); required.
	Histories Histories
	// Client sends the webhooks. Default: a client of its own holding at
	// most Concurrency connections, following no redirect.
	Client *http.Client
	// Registerer receives the metrics; none when nil.
	Registerer prometheus.Registerer
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Rand returns jitter in [0, 1); math/rand/v2 when nil.
	Rand func() float64
}

func (c *Config) setDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.From == "" {
		c.From = FromNow
	}
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	for _, d := range []struct {
		d *time.Duration
		v time.Duration
	}{
		{&c.Timeout, 10 * time.Second},
		{&c.RetryFor, 24 * time.Hour},
		{&c.BackoffInitial, 5 * time.Second},
		{&c.BackoffMax, time.Hour},
		{&c.Keep, 7 * 24 * time.Hour},
		{&c.PollInterval, 2 * time.Second},
		{&c.StatsInterval, 5 * time.Second},
		{&c.RetryDelay, 2 * time.Second},
	} {
		if *d.d == 0 {
			*d.d = d.v
		}
	}
	if c.Client == nil {
		c.Client = newClient(c.Concurrency, c.Timeout)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
}

// Validate checks the settings (not Pool, Store and Histories, which New
// requires); the error names the first setting at fault. The settings
// without an environment variable may be zero, for their defaults.
func (c *Config) Validate() error {
	bad := func(setting, format string, args ...any) error {
		return fmt.Errorf("%s: %s: %w", setting, fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	if err := checkURL(c.URL); err != nil {
		return bad("REVIEWLEDGER_NOTIFY_URL", "%v", err)
	}
	if err := CheckSecret(c.Secret); err != nil {
		return bad("REVIEWLEDGER_NOTIFY_SECRET", "%v", err)
	}
	switch {
	case c.Concurrency < 1 || c.Concurrency > MaxConcurrency:
		return bad("REVIEWLEDGER_NOTIFY_CONCURRENCY", "must be between 1 and %d, got %d", MaxConcurrency, c.Concurrency)
	case c.Timeout <= 0:
		return bad("REVIEWLEDGER_NOTIFY_TIMEOUT", "must be a positive duration such as 10s, got %s", c.Timeout)
	case c.RetryFor <= 0:
		return bad("REVIEWLEDGER_NOTIFY_RETRY_FOR", "must be a positive duration such as 24h, got %s", c.RetryFor)
	case c.BackoffInitial <= 0:
		return bad("REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL", "must be a positive duration such as 5s, got %s", c.BackoffInitial)
	case c.BackoffMax < c.BackoffInitial:
		return bad("REVIEWLEDGER_NOTIFY_BACKOFF_MAX", "must be at least REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL (%s), got %s", c.BackoffInitial, c.BackoffMax)
	case c.From != FromNow && c.From != FromStart:
		return bad("REVIEWLEDGER_NOTIFY_FROM", "must be %s or %s, got %q", FromNow, FromStart, c.From)
	case c.Keep <= 0:
		return bad("REVIEWLEDGER_NOTIFY_KEEP", "must be a positive duration such as 168h, got %s", c.Keep)
	case c.BatchSize < 0 || c.BatchSize > 100000: // zero: the default
		return bad("BatchSize", "must be between 1 and 100000, got %d", c.BatchSize)
	case c.PollInterval < 0 || c.StatsInterval < 0 || c.RetryDelay < 0:
		return bad("PollInterval, StatsInterval, RetryDelay", "must not be negative")
	}
	return nil
}

// checkURL accepts an absolute http or https URL with a host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	switch {
	case s == "":
		return errors.New("required")
	case err != nil:
		return fmt.Errorf("not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("must be an http or https URL, got scheme %q", u.Scheme)
	case u.Host == "":
		return errors.New("must name a host")
	}
	return nil
}

// CheckSecret checks a signing secret: "whsec_" followed by the base64 of
// at least MinSecretBytes bytes. The error never quotes the secret.
func CheckSecret(secret string) error {
	b64, ok := strings.CutPrefix(secret, "whsec_")
	switch {
	case secret == "":
		return errors.New("required: whsec_ and the base64 of a random key")
	case !ok:
		return errors.New("must start with whsec_")
	}
	key, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return errors.New("the part after whsec_ is not base64")
	}
	if len(key) < MinSecretBytes {
		return fmt.Errorf("key is %d bytes, want at least %d", len(key), MinSecretBytes)
	}
	return nil
}

// newClient returns the HTTP client of the webhooks: at most conns
// connections to the receiver, no redirect followed (a 3xx is a failed
// attempt). Each attempt's context bounds it as a whole.
func newClient(conns int, timeout time.Duration) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxConnsPerHost = conns
	t.MaxIdleConnsPerHost = conns
	t.MaxIdleConns = conns
	t.TLSHandshakeTimeout = min(timeout, 10*time.Second)
	return &http.Client{
		Transport:     t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// sessions is the pool of the sender's election connection.
func (c Config) sessions() *pgxpool.Pool {
	if c.Sessions != nil {
		return c.Sessions
	}
	return c.Pool
}
