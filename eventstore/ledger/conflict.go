package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	storedjson "github.com/go-json-experiment/json/v1"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// conflictAppendTries bounds the retries of a conflict append that lost a
// race with another conflict of the same review.
const conflictAppendTries = 10

// RecordConflict appends a refused completion to the review's conflict
// stream (domain.ConflictStreamName), never to the review's own stream, so
// the review's revision does not move. The conflict stream is hash-chained
// like a review stream; each append states the revision it read, and
// retries when another conflict of the same review was appended meanwhile.
func (l *Ledger) RecordConflict(ctx context.Context, e domain.ConflictingCompletionRecorded, actor Actor) error {
	if err := domain.ValidateReviewID(e.ReviewID); err != nil {
		return err
	}
	stream := domain.ConflictStreamName(e.ReviewID)
	body, err := domain.EncodeEvent(e)
	if err != nil {
		return err
	}
	id := l.newID()
	for range conflictAppendTries {
		expected, rev, prev, err := l.conflictHead(ctx, stream)
		if err != nil {
			return err
		}
		meta := Metadata{Schema: domain.SchemaVersion, Actor: actor.Name, RequestID: actor.RequestID, PrevHash: prev}
		meta.Hash = chainHash(prev, stream, rev, e.EventType(), body, actor.Name)
		mb, err := json.Marshal(meta)
		if err != nil {
			return fmt.Errorf("encode metadata: %w", err)
		}
		_, err = l.group.append(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected,
			Events: []eventstore.EventData{{ID: id, Type: e.EventType(), Data: body, Metadata: mb}}}, nil)
		if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			continue
		}
		if err != nil {
			return fmt.Errorf("append to %s: %w", stream, err)
		}
		return nil
	}
	return fmt.Errorf("append to %s: %d concurrent appends in a row: %w", stream, conflictAppendTries, eventstore.ErrWrongExpectedVersion)
}

// conflictHead returns what the next append to a conflict stream expects,
// the revision it gets and the hash it chains onto.
func (l *Ledger) conflictHead(ctx context.Context, stream string) (eventstore.ExpectedRevision, uint64, string, error) {
	recs, err := l.store.ReadStream(ctx, stream, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return eventstore.NoStream, 0, "", nil
	}
	if err != nil {
		return eventstore.ExpectedRevision{}, 0, "", fmt.Errorf("read %s: %w", stream, err)
	}
	last := recs[len(recs)-1]
	var meta Metadata
	if err := storedjson.Unmarshal(last.Metadata, &meta); err != nil {
		return eventstore.ExpectedRevision{}, 0, "", fmt.Errorf("%s revision %d: metadata: %v: %w", stream, last.Revision, err, domain.ErrCorruptHistory)
	}
	return eventstore.Exact(last.Revision), last.Revision + 1, meta.Hash, nil
}

// ConflictLog is a review's conflict stream as stored: the completions
// refused for it, in the order they were recorded.
type ConflictLog struct {
	ReviewID string
	Events   []Entry
}

// Conflicts reads the review's conflict stream; a review without
// conflicts has an empty log.
func (l *Ledger) Conflicts(ctx context.Context, reviewID string) (*ConflictLog, error) {
	if err := domain.ValidateReviewID(reviewID); err != nil {
		return nil, err
	}
	stream := domain.ConflictStreamName(reviewID)
	log := &ConflictLog{ReviewID: reviewID}
	recs, err := l.store.ReadStream(ctx, stream, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return log, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	prev := ""
	for _, rec := range recs {
		if rec.Type != domain.TypeConflictingCompletionRecorded {
			return nil, fmt.Errorf("%s revision %d: unexpected type %q: %w", stream, rec.Revision, rec.Type, domain.ErrCorruptHistory)
		}
		e, err := l.entry(ctx, rec, prev)
		if err != nil {
			return nil, fmt.Errorf("%s revision %d: %w", stream, rec.Revision, err)
		}
		log.Events = append(log.Events, e)
		prev = e.Metadata.Hash
	}
	return log, nil
}

// Verify checks the conflict stream's hash chain as History.Verify checks
// a review's: a *ChainError matching ErrTampered at the first break.
func (c *ConflictLog) Verify() error {
	return verifyChain(c.ReviewID, domain.ConflictStreamName(c.ReviewID), c.Events)
}
