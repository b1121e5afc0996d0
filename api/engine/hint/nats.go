package hint

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	natsjs "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/jetstream"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/reviewledger/reviewledger/eventstore/clock"
)

// openNATS opens the JetStream work-queue stream of cfg.Topic
// (watermill-nats) on the NATS servers of cfg.NATSURL.
func (b *Bus) openNATS(ctx context.Context, cfg Config) error {
	closed := make(chan struct{})
	// Several servers (a cluster) may be given; the client moves to another
	// when its server fails, and never stops reconnecting: a broker outage
	// costs hints, never the process.
	nc, err := nats.Connect(cfg.NATSURL, nats.Name("reviewledger-runner"),
		nats.MaxReconnects(-1), nats.ReconnectWait(250*time.Millisecond),
		nats.DrainTimeout(5*time.Second), nats.ClosedHandler(func(*nats.Conn) { close(closed) }))
	if err != nil {
		return fmt.Errorf("REVIEWLEDGER_NATS_URL %s: %w", cfg.NATSURL, err)
	}
	// A work-queue stream: each message goes to one member of the consumer
	// group and is deleted once acknowledged.
	streamConfig := func(topic string) jetstream.StreamConfig {
		return jetstream.StreamConfig{Name: topic, Subjects: []string{topic}, Retention: jetstream.WorkQueuePolicy,
			Replicas: cfg.NATSReplicas}
	}
	js, err := jetstream.New(nc)
	if err == nil {
		err = ensureStream(ctx, cfg.Logger, js, streamConfig(cfg.Topic))
	}
	if err != nil {
		nc.Close()
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: JetStream stream %s at %s: %w", cfg.Topic, cfg.NATSURL, err)
	}
	pub, err := natsjs.NewPublisher(natsjs.PublisherConfig{Conn: nc, Logger: b.logger, ConfigureStream: streamConfig})
	if err != nil {
		nc.Close()
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: publisher: %w", err)
	}
	sub, err := natsjs.NewSubscriber(natsjs.SubscriberConfig{
		Conn: nc, Logger: b.logger, ResourceInitializer: natsjs.GroupedConsumer("reviewledger-runner"),
		ConfigureStream: streamConfig,
	})
	if err != nil {
		nc.Close()
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=nats: subscriber: %w", err)
	}
	b.publisher, b.subscriber = pub, sub
	b.close = func() error {
		// The subscriber drains the shared connection, which closes it
		// when done; wait for that, so nothing outlives the bus.
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
	return nil
}

// streamSetupTime bounds how long a starting process tries to create or
// update the work stream: a cluster that has just formed, or is electing a
// leader, answers only once it has one.
const streamSetupTime = time.Minute

// ensureStream creates or updates the work stream, trying again while the
// cluster cannot answer yet, until ctx is done.
func ensureStream(ctx context.Context, log *slog.Logger, js jetstream.JetStream, cfg jetstream.StreamConfig) error {
	giveUp := time.Now().Add(streamSetupTime)
	for {
		tryCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := js.CreateOrUpdateStream(tryCtx, cfg)
		cancel()
		if err == nil || time.Now().After(giveUp) {
			return err
		}
		log.Warn("JetStream work stream not ready; retrying", "stream", cfg.Name, "error", err.Error())
		if err := clock.Sleep(ctx, time.Second); err != nil {
			return fmt.Errorf("JetStream work stream %s not ready: %w", cfg.Name, err)
		}
	}
}
