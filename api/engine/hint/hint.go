// Package hint carries the engine's work hints between processes through
// Watermill: a Go channel in one process, a PostgreSQL queue table
// (watermill-sql) or a NATS JetStream work-queue stream (watermill-nats).
// A hint is a review ID: it tells the processes that work reviews that the
// review may be ready to claim. It is the engine's Hints port
// (engine.Hints); the composition root opens a Bus and hands it to the
// engine.
//
// A hint lost, late or delivered twice changes nothing: the work record,
// not the message, says who works a review, and every worker polls for due
// records anyway (docs/engine.md, "Dispatch").
package hint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The transports, by their REVIEWLEDGER_PUBSUB names.
const (
	PubSubGoChannel = "gochannel"
	PubSubPostgres  = "postgres"
	PubSubNATS      = "nats"
)

// ErrInvalidConfig names the hint setting at fault.
var ErrInvalidConfig = errors.New("invalid hint configuration")

// ErrClosed: the bus was closed.
var ErrClosed = errors.New("hint bus closed")

// Config selects and configures the transport; zero settings take the
// documented defaults.
type Config struct {
	// PubSub is gochannel (default), postgres or nats.
	PubSub string
	// Pool is the database of the postgres transport; needed only for it.
	Pool *pgxpool.Pool
	// NATSURL is the NATS servers, comma-separated (default
	// nats://127.0.0.1:4222); NATSReplicas the work stream's replicas
	// (default 1).
	NATSURL      string
	NATSReplicas int
	// Topic is the work topic: the queue table for postgres, the
	// JetStream stream for nats. Default "reviewledger_review_work".
	Topic  string
	Logger *slog.Logger // default slog.Default()
}

func (c *Config) setDefaults() {
	if c.PubSub == "" {
		c.PubSub = PubSubGoChannel
	}
	if c.NATSURL == "" {
		c.NATSURL = "nats://127.0.0.1:4222"
	}
	if c.Topic == "" {
		c.Topic = "reviewledger_review_work"
	}
	if c.NATSReplicas == 0 {
		c.NATSReplicas = 1
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate names the first setting at fault.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalidConfig)
	}
	switch {
	case c.PubSub != PubSubGoChannel && c.PubSub != PubSubPostgres && c.PubSub != PubSubNATS:
		return bad("REVIEWLEDGER_PUBSUB must be gochannel, postgres or nats, got %q", c.PubSub)
	case c.PubSub == PubSubPostgres && c.Pool == nil:
		return bad("hint: Pool is required with REVIEWLEDGER_PUBSUB=postgres")
	case c.NATSReplicas < 1 || c.NATSReplicas > 5:
		return bad("REVIEWLEDGER_NATS_REPLICAS must be between 1 and 5, got %d", c.NATSReplicas)
	}
	return nil
}

// Bus publishes and delivers hints on one topic. It implements
// engine.Hints.
type Bus struct {
	topic      string
	local      bool // a Go channel: hints reach this process only
	logger     watermill.LoggerAdapter
	publisher  message.Publisher
	subscriber message.Subscriber
	close      func() error

	// handing orders the hand-offs to the handler before the subscriber's
	// shutdown: watermill-nats closes its output channel without
	// synchronising with its senders, so Subscribe's stop takes it for
	// writing (once every hand-off made holds it no more) before closing
	// the router.
	handing sync.RWMutex

	mu     sync.RWMutex // guards publishing against Close
	closed bool
}

// Open opens the transport cfg names. ctx bounds the set-up (the NATS
// work stream is tried again while a new cluster elects its leader).
func Open(ctx context.Context, cfg Config) (*Bus, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &Bus{topic: cfg.Topic, logger: newLogger(cfg.Logger)}
	var err error
	switch cfg.PubSub {
	case PubSubGoChannel:
		b.openGoChannel()
	case PubSubPostgres:
		err = b.openPostgres(cfg)
	case PubSubNATS:
		err = b.openNATS(ctx, cfg)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

// NewGoChannel is the in-process bus: hints reach this process only.
func NewGoChannel(log *slog.Logger) *Bus {
	if log == nil {
		log = slog.Default()
	}
	b := &Bus{topic: "reviewledger_review_work", logger: newLogger(log)}
	b.openGoChannel()
	return b
}

func (b *Bus) openGoChannel() {
	ch := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, b.logger)
	b.publisher, b.subscriber, b.close, b.local = ch, ch, ch.Close, true
}

// newLogger is Watermill's logger: its information is debugging here, and
// its errors are warnings: messages only hint at work the work records
// hold, so a message lost to a broker or database fault costs time, never a
// review (the next poll finds it).
func newLogger(log *slog.Logger) watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(log.With("component", "watermill"), map[slog.Level]slog.Level{
		slog.LevelInfo:  slog.LevelDebug,
		slog.LevelError: slog.LevelWarn,
	})
}

// Local reports whether hints reach this process only (the Go channel).
func (b *Bus) Local() bool { return b.local }

// Publish sends a review's ID to the work topic.
func (b *Bus) Publish(reviewID string) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return fmt.Errorf("publish %q: %w", reviewID, ErrClosed)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(reviewID))
	if err := b.publisher.Publish(b.topic, msg); err != nil {
		return fmt.Errorf("publish %q: %w", reviewID, err)
	}
	return nil
}

// Subscribe routes the work topic's messages to handle: each message is a
// hint (a review ID), acknowledged once handle returns. stop stops taking
// messages and waits for the router; handle is not called after it.
func (b *Bus) Subscribe(handle func(reviewID string)) (stop func() error, err error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, b.logger)
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	router.AddConsumerHandler("review-work", b.topic, b.subscriber, func(msg *message.Message) error {
		b.handing.RLock()
		defer b.handing.RUnlock()
		handle(string(msg.Payload))
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
	case err := <-done:
		return nil, err
	}
	return func() error {
		b.handing.Lock()
		b.handing.Unlock() //nolint:staticcheck // SA2001: the empty critical section is the point
		err := router.Close()
		if runErr := <-done; err == nil {
			err = runErr
		}
		return err
	}, nil
}

// Close closes the publisher and the subscriber; Publish fails after it
// with ErrClosed. Closing again does nothing.
func (b *Bus) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	return b.close()
}
