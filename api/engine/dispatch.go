package engine

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	natsjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// openPubSub creates the publisher and subscriber of the configured
// backend. Messages carry only a review ID: a hint to claim its record.
func (e *Engine) openPubSub() error {
	logger := e.watermillLogger()
	switch e.cfg.PubSub {
	case PubSubGoChannel:
		ch := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 1024}, logger)
		e.publisher, e.subscriber, e.closePub = ch, ch, ch.Close
	case PubSubPostgres:
		db := wsql.BeginnerFromPgx(e.cfg.Pool)
		schema := wsql.PostgreSQLQueueSchema{GeneratePayloadType: func(string) string { return "BYTEA" }, SubscribeBatchSize: 1}
		offsets := wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}
		pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema}, logger)
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: publisher: %w", err)
		}
		sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
			SchemaAdapter: schema, OffsetsAdapter: offsets, PollInterval: 250 * time.Millisecond,
		}, logger)
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: subscriber: %w", err)
		}
		// The queue table is created once, here, before anything publishes
		// or subscribes: PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe
		// against itself, so processes starting together may collide and
		// try again.
		for i := 0; ; i++ {
			if err = sub.SubscribeInitialize(e.cfg.Topic); err == nil || i == 2 {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: queue table: %w", err)
		}
		e.publisher, e.subscriber = pub, sub
		e.closePub = func() error {
			if err := sub.Close(); err != nil {
				return err
			}
			return pub.Close()
		}
	case PubSubNATS:
		closed := make(chan struct{})
		// Several servers (a cluster) may be given; the client moves to
		// another when its server fails, and never stops reconnecting: a
		// broker outage costs hints, never the process.
		nc, err := nats.Connect(e.cfg.NATSURL, nats.Name("reviewledger-runner"),
			nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
			nats.DrainTimeout(5*time.Second), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_NATS_URL %s: %w", e.cfg.NATSURL, err)
		}
		// A work-queue stream: each message goes to one member of the
		// consumer group and is deleted once acknowledged.
		streamConfig := func(topic string) jetstream.StreamConfig {
			return jetstream.StreamConfig{Name: topic, Subjects: []string{topic}, Retention: jetstream.WorkQueuePolicy,
				Replicas: e.cfg.NATSReplicas}
		}
		js, err := jetstream.New(nc)
		if err == nil {
			err = e.ensureStream(js, streamConfig(e.cfg.Topic))
		}
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: JetStream stream %s at %s: %w", e.cfg.Topic, e.cfg.NATSURL, err)
		}
		pub, err := natsjs.NewPublisher(natsjs.PublisherConfig{Conn: nc, Logger: logger, ConfigureStream: streamConfig})
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: publisher: %w", err)
		}
		sub, err := natsjs.NewSubscriber(natsjs.SubscriberConfig{
			Conn: nc, Logger: logger, ResourceInitializer: natsjs.GroupedConsumer("reviewledger-runner"),
			ConfigureStream: streamConfig,
		})
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: subscriber: %w", err)
		}
		e.publisher, e.subscriber = pub, sub
		e.closePub = func() error {
			// The subscriber drains the shared connection, which closes
			// it when done; wait for that, so nothing outlives the runner.
			err := sub.Close()
			select {
			case <-closed:
			case <-time.After(10 * time.Second):
			}
			if perr := pub.Close(); err == nil {
				err = perr
			}
			return err
		}
	}
	return nil
}

// watermillLogger is Watermill's logger: its information is debugging
// here, and its errors are warnings: messages only hint at work the work
// records hold, so a message lost to a broker or database fault costs time,
// never a review (the next poll finds it).
func (e *Engine) watermillLogger() watermill.LoggerAdapter {
	return watermill.NewSlogLoggerWithLevelMapping(e.log.With("component", "watermill"), map[slog.Level]slog.Level{
		slog.LevelInfo:  slog.LevelDebug,
		slog.LevelError: slog.LevelWarn,
	})
}

// startRouter routes work messages to the claim loop: each message is a
// hint (a review ID), acknowledged at once. The work record, not the
// message, says who works a review: a message lost, late or delivered
// twice changes nothing, since only a claim of a due, unheld record takes
// a review.
func (e *Engine) startRouter() (*message.Router, chan error, error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second},
		e.watermillLogger())
	if err != nil {
		return nil, nil, fmt.Errorf("engine: router: %w", err)
	}
	router.AddConsumerHandler("review-work", e.cfg.Topic, e.subscriber, func(msg *message.Message) error {
		e.hint(string(msg.Payload))
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- router.Run(context.Background()) }()
	select {
	case <-router.Running():
		return router, done, nil
	case err := <-done:
		return nil, nil, fmt.Errorf("engine: dispatch: %w", err)
	}
}

// stopRouter stops taking messages and waits for the router. Taking the
// hints' lock first orders every hand-off already made before the
// subscriber's shutdown (watermill-nats closes its output channel without
// synchronising with its senders; see docs/engine.md).
func (e *Engine) stopRouter(router *message.Router, done chan error) error {
	e.hints.mu.Lock()
	e.hints.mu.Unlock() //nolint:staticcheck // SA2001: the empty critical section is the point
	err := router.Close()
	if runErr := <-done; err == nil {
		err = runErr
	}
	return err
}

// publish sends a review's ID to the work topic.
func (e *Engine) publish(reviewID string) error {
	e.pubMu.RLock()
	defer e.pubMu.RUnlock()
	if e.pubClosed {
		return fmt.Errorf("publish %q: %w", reviewID, ErrShutdown)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte(reviewID))
	if err := e.publisher.Publish(e.cfg.Topic, msg); err != nil {
		return fmt.Errorf("publish %q: %w", reviewID, err)
	}
	return nil
}

// streamSetupTime bounds how long a starting process tries to create or
// update the work stream: a cluster that has just formed, or is electing
// a leader, answers only once it has one.
const streamSetupTime = time.Minute

// ensureStream creates or updates the work stream, trying again while the
// cluster cannot answer yet.
func (e *Engine) ensureStream(js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	giveUp := time.Now().Add(streamSetupTime)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := js.CreateOrUpdateStream(ctx, cfg)
		cancel()
		if err == nil || time.Now().After(giveUp) {
			return err
		}
		e.log.Warn("JetStream work stream not ready; retrying", "stream", cfg.Name, "error", err.Error())
		if err := clock.Sleep(e.stopping, time.Second); err != nil {
			return fmt.Errorf("JetStream work stream %s not ready: %w", cfg.Name, err)
		}
	}
}
