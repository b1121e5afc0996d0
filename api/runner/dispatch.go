package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// openPubSub creates the publisher and subscriber of the configured
// backend. Messages carry only a review ID: the handler reloads the stream,
// so a message delivered twice, or late, is harmless.
func (s *Service) openPubSub() error {
	logger := watermill.NewSlogLoggerWithLevelMapping(s.log.With("component", "watermill"), map[slog.Level]slog.Level{
		slog.LevelInfo: slog.LevelDebug,
	})
	switch s.cfg.PubSub {
	case PubSubGoChannel:
		ch := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: int64(s.cfg.Workers)}, logger)
		s.publisher, s.subscriber, s.closePub = ch, ch, ch.Close
	case PubSubPostgres:
		db := wsql.BeginnerFromPgx(s.cfg.Pool)
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
			if err = sub.SubscribeInitialize(s.cfg.Topic); err == nil || i == 2 {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: queue table: %w", err)
		}
		s.publisher, s.subscriber = pub, sub
		s.closePub = func() error {
			if err := sub.Close(); err != nil {
				return err
			}
			return pub.Close()
		}
	case PubSubNATS:
		closed := make(chan struct{})
		nc, err := nats.Connect(s.cfg.NATSURL, nats.Name("reviewledger-runner"),
			nats.DrainTimeout(5*time.Second), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
		if err != nil {
			return fmt.Errorf("REVIEWLEDGER_NATS_URL %s: %w", s.cfg.NATSURL, err)
		}
		// A work-queue stream: each message goes to one member of the
		// consumer group and is deleted once acknowledged.
		streamConfig := func(topic string) jetstream.StreamConfig {
			return jetstream.StreamConfig{Name: topic, Subjects: []string{topic}, Retention: jetstream.WorkQueuePolicy}
		}
		js, err := jetstream.New(nc)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err = js.CreateOrUpdateStream(ctx, streamConfig(s.cfg.Topic))
			cancel()
		}
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: JetStream stream %s at %s: %w", s.cfg.Topic, s.cfg.NATSURL, err)
		}
		pub, err := wnats.NewPublisher(wnats.PublisherConfig{Conn: nc, Logger: logger, ConfigureStream: streamConfig})
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: publisher: %w", err)
		}
		sub, err := wnats.NewSubscriber(wnats.SubscriberConfig{
			Conn: nc, Logger: logger, ResourceInitializer: wnats.GroupedConsumer("reviewledger-runner"),
			ConfigureStream: streamConfig,
		})
		if err != nil {
			nc.Close()
			return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: subscriber: %w", err)
		}
		s.publisher, s.subscriber = pub, sub
		s.closePub = func() error {
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

// newRouter routes work messages to the worker pool. The handler returns
// (and the message is acknowledged) once a worker has taken the review, so
// the pool bounds concurrency; a review taken by a process that then dies
// is recovered by the next start's resume, or escalated by any process's
// deadline sweeper.
func (s *Service) newRouter() (*message.Router, error) {
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second},
		watermill.NewSlogLoggerWithLevelMapping(s.log.With("component", "watermill"), map[slog.Level]slog.Level{
			slog.LevelInfo: slog.LevelDebug,
		}))
	if err != nil {
		return nil, fmt.Errorf("runner: router: %w", err)
	}
	router.AddConsumerHandler("review-work", s.cfg.Topic, s.subscriber, func(msg *message.Message) error {
		s.dispatch(msg.Context(), string(msg.Payload))
		return nil
	})
	return router, nil
}

// resume dispatches every pending review, so that work taken by a process
// that stopped or died is picked up again.
func (s *Service) resume(ctx context.Context) {
	var (
		ids  []string
		err  error
		wait = time.Second
	)
	// A failed read (the database restarting, out of connections) is
	// retried with backoff: reviews left pending by a dead process must not
	// wait for the sweeper to escalate them untried.
	for {
		if ids, err = s.state.pending(ctx, farFuture, resumeLimit); err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		s.log.Error("resume pending reviews; retrying", "error", err.Error(), "retry_in_ms", wait.Milliseconds())
		if s.clock.Sleep(ctx, wait) != nil {
			return
		}
		wait = min(2*wait, 30*time.Second)
	}
	if len(ids) > 0 {
		s.log.Info("resuming pending reviews", "count", len(ids))
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		s.dispatch(ctx, id)
	}
}

const resumeLimit = 100000

var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
