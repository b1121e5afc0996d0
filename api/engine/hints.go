package engine

// Hints is the engine's port to the processes that work reviews: it carries
// hints, review IDs of work that may be ready to claim. Package
// api/engine/hint has the adapters (a Go channel, PostgreSQL, NATS
// JetStream); the composition root opens one and hands it to New.
//
// A hint only says where to look: the work record, not the message, says
// who works a review, so a hint lost, late or delivered twice changes
// nothing, since only a claim of a due record that no live lease holds
// takes a review. A lost hint costs time: every worker polls for due work.
type Hints interface {
	// Publish sends a review's ID to the processes that work reviews. It
	// fails once Close was called.
	Publish(reviewID string) error
	// Subscribe hands every hint received to handle, acknowledging it once
	// handle returns, until stop is called; stop returns once handle is no
	// longer called.
	Subscribe(handle func(reviewID string)) (stop func() error, err error)
	// Local reports whether hints reach this process only (the Go
	// channel): a process working reviews then hints itself and publishes
	// nothing.
	Local() bool
	// Close releases the transport. The engine calls it once, when Run
	// returns.
	Close() error
}

// publish sends a review's ID to the work topic.
func (e *Engine) publish(reviewID string) error { return e.cfg.Hints.Publish(reviewID) }
