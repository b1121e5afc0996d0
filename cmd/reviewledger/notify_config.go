package main

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/eventstore"
)

// NotifyConfig is the decision webhooks' settings, embedded in the serve
// command. The webhooks are off while REVIEWLEDGER_NOTIFY_URL is unset;
// the projector role sends them.
type NotifyConfig struct {
	URL            string        `name:"notify-url" env:"REVIEWLEDGER_NOTIFY_URL" help:"URL receiving a signed webhook when a review reaches manual_review or a final state; off when empty."`
	Secret         string        `name:"notify-secret" env:"REVIEWLEDGER_NOTIFY_SECRET" help:"Standard Webhooks secret (whsec_ + base64 of 16 bytes or more) signing the webhooks; required with REVIEWLEDGER_NOTIFY_URL."`
	Concurrency    int           `name:"notify-concurrency" env:"REVIEWLEDGER_NOTIFY_CONCURRENCY" default:"16" help:"Webhook deliveries in flight at once: the most connections held to the receiver."`
	Timeout        time.Duration `name:"notify-timeout" env:"REVIEWLEDGER_NOTIFY_TIMEOUT" default:"10s" help:"How long one webhook attempt may take, from connecting to the answer."`
	RetryFor       time.Duration `name:"notify-retry-for" env:"REVIEWLEDGER_NOTIFY_RETRY_FOR" default:"24h" help:"How long a failing webhook is retried before it is given up (redeliver it then)."`
	BackoffInitial time.Duration `name:"notify-backoff-initial" env:"REVIEWLEDGER_NOTIFY_BACKOFF_INITIAL" default:"5s" help:"Wait after a webhook's first failed attempt; it doubles with each failure."`
	BackoffMax     time.Duration `name:"notify-backoff-max" env:"REVIEWLEDGER_NOTIFY_BACKOFF_MAX" default:"1h" help:"Longest wait between two attempts of a webhook (unless the receiver's Retry-After asks for more)."`
	From           string        `name:"notify-from" env:"REVIEWLEDGER_NOTIFY_FROM" default:"now" help:"Where the webhooks start the first time they run: now (decisions from then on) or start (every decision in the ledger)."`
	Keep           time.Duration `name:"notify-keep" env:"REVIEWLEDGER_NOTIFY_KEEP" default:"168h" help:"How long delivered webhooks stay listed before they are deleted."`
}

// enabled reports whether webhooks are configured.
func (c NotifyConfig) enabled() bool { return c.URL != "" }

// config is the notifier's configuration for these settings.
func (c NotifyConfig) config() notify.Config {
	return notify.Config{
		URL: c.URL, Secret: c.Secret, Concurrency: c.Concurrency, Timeout: c.Timeout, RetryFor: c.RetryFor,
		BackoffInitial: c.BackoffInitial, BackoffMax: c.BackoffMax, From: c.From, Keep: c.Keep,
	}
}

// Validate names the setting at fault. Unset, the webhooks are off and
// only the secret, when given, is checked.
func (c NotifyConfig) Validate() error {
	if !c.enabled() {
		if c.Secret != "" {
			if err := notify.CheckSecret(c.Secret); err != nil {
				return fmt.Errorf("REVIEWLEDGER_NOTIFY_SECRET: %w", err)
			}
		}
		return nil
	}
	cfg := c.config()
	return cfg.Validate()
}

// newNotifier builds the notifier of serve, nil when the webhooks are off.
func (c NotifyConfig) newNotifier(dbs pools, store eventstore.Store, histories notify.Histories,
	reg prometheus.Registerer, log *slog.Logger) (*notify.Notifier, error) {
	if !c.enabled() {
		return nil, nil
	}
	cfg := c.config()
	cfg.Pool, cfg.Sessions, cfg.Store, cfg.Histories, cfg.Registerer, cfg.Logger = dbs.Main, dbs.Sessions, store, histories, reg, log
	return notify.New(cfg)
}
