package hint

import (
	"fmt"
	"time"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
)

// openPostgres opens the PostgreSQL queue table of cfg.Topic
// (watermill-sql): each message goes to one subscriber and is deleted once
// acknowledged.
func (b *Bus) openPostgres(cfg Config) error {
	db := wsql.BeginnerFromPgx(cfg.Pool)
	schema := wsql.PostgreSQLQueueSchema{GeneratePayloadType: func(string) string { return "BYTEA" }, SubscribeBatchSize: 1}
	offsets := wsql.PostgreSQLQueueOffsetsAdapter{DeleteOnAck: true}
	pub, err := wsql.NewPublisher(db, wsql.PublisherConfig{SchemaAdapter: schema}, b.logger)
	if err != nil {
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: publisher: %w", err)
	}
	sub, err := wsql.NewSubscriber(db, wsql.SubscriberConfig{
		SchemaAdapter: schema, OffsetsAdapter: offsets, PollInterval: 250 * time.Millisecond,
	}, b.logger)
	if err != nil {
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: subscriber: %w", err)
	}
	// The queue table is created once, here, before anything publishes or
	// subscribes: PostgreSQL's CREATE TABLE IF NOT EXISTS is not safe
	// against itself, so processes starting together may collide and try
	// again.
	for i := 0; ; i++ {
		if err = sub.SubscribeInitialize(cfg.Topic); err == nil || i == 2 {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("REVIEWLEDGER_PUBSUB=postgres: queue table: %w", err)
	}
	b.publisher, b.subscriber = pub, sub
	b.close = func() error {
		if err := sub.Close(); err != nil {
			return err
		}
		return pub.Close()
	}
	return nil
}
