package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// sideAppendTries bounds the retries of a side-stream append that lost a
// race with another append to the same stream.
const sideAppendTries = 10

// RecordConflict appends a refused completion to the review's conflict
// stream (domain.ConflictStreamName), never to the review's own stream, so
// the review's revision does not move. The conflict stream is hash-chained
// like a review stream; each append states the revision it read, and
// retries when another conflict of the same review was appended meanwhile.
func (l *Ledger) RecordConflict(ctx context.Context, e domain.ConflictingCompletionRecorded, actor Actor) error {
	if err := domain.ValidateReviewID(e.ReviewID); err != nil {
		return err
	}
	return l.appendSide(ctx, domain.ConflictStreamName(e.ReviewID), e, actor)
}

// RecordShadow appends a shadow provider's observation to the review's
// shadow stream (domain.ShadowStreamName), hash-chained like the conflict
// stream and, like it, never moving the review's revision.
func (l *Ledger) RecordShadow(ctx context.Context, e domain.ShadowObserved, actor Actor) error {
	if err := domain.ValidateReviewID(e.ReviewID); err != nil {
		return err
	}
	return l.appendSide(ctx, domain.ShadowStreamName(e.ReviewID), e, actor)
}

// appendSide appends e to one of a review's side streams, chained onto its
// last event, retrying when another append to it won meanwhile.
func (l *Ledger) appendSide(ctx context.Context, stream string, e domain.Event, actor Actor) error {
	body, err := domain.EncodeEvent(e)
	if err != nil {
		return err
	}
	id := l.newID()
	for range sideAppendTries {
		expected, rev, prev, err := l.sideHead(ctx, stream)
		if err != nil {
			return err
		}
		meta := Metadata{Schema: domain.SchemaVersion, Actor: actor.Name, RequestID: actor.RequestID, PrevHash: prev}
		meta.Hash = chainHash(prev, stream, rev, e.EventType(), body, actor.Name)
		mb, err := meta.Encode()
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
	return fmt.Errorf("append to %s: %d concurrent appends in a row: %w", stream, sideAppendTries, eventstore.ErrWrongExpectedVersion)
}

// sideHead returns what the next append to a side stream expects, the
// revision it gets and the hash it chains onto.
func (l *Ledger) sideHead(ctx context.Context, stream string) (eventstore.ExpectedRevision, uint64, string, error) {
	recs, err := l.store.ReadStream(ctx, stream, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return eventstore.NoStream, 0, "", nil
	}
	if err != nil {
		return eventstore.ExpectedRevision{}, 0, "", fmt.Errorf("read %s: %w", stream, err)
	}
	last := recs[len(recs)-1]
	meta, err := DecodeMetadata(last.Metadata)
	if err != nil {
		return eventstore.ExpectedRevision{}, 0, "", fmt.Errorf("%s revision %d: metadata: %v: %w", stream, last.Revision, err, domain.ErrCorruptHistory)
	}
	return eventstore.Exact(last.Revision), last.Revision + 1, meta.Hash, nil
}

// ConflictLog is a review's conflict stream as stored: the completions
// refused for it, in the order they were recorded.
type ConflictLog = SideLog

// SideLog is one of a review's side streams as stored (its conflict or
// its shadow stream), in the order its events were recorded.
type SideLog struct {
	ReviewID string
	Events   []Entry
	stream   string
}

// Conflicts reads the review's conflict stream; a review without
// conflicts has an empty log.
func (l *Ledger) Conflicts(ctx context.Context, reviewID string) (*ConflictLog, error) {
	return l.readSide(ctx, reviewID, domain.ConflictStreamName, domain.TypeConflictingCompletionRecorded)
}

// Shadows reads the review's shadow stream; a review no shadow provider
// answered has an empty log.
func (l *Ledger) Shadows(ctx context.Context, reviewID string) (*SideLog, error) {
	return l.readSide(ctx, reviewID, domain.ShadowStreamName, domain.TypeShadowObserved)
}

func (l *Ledger) readSide(ctx context.Context, reviewID string, name func(string) string, typ string) (*SideLog, error) {
	if err := domain.ValidateReviewID(reviewID); err != nil {
		return nil, err
	}
	stream := name(reviewID)
	log := &SideLog{ReviewID: reviewID, stream: stream}
	recs, err := l.store.ReadStream(ctx, stream, 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return log, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", stream, err)
	}
	prev := ""
	for _, rec := range recs {
		if rec.Type != typ {
			return nil, fmt.Errorf("%s revision %d: unexpected type %q: %w", stream, rec.Revision, rec.Type, domain.ErrCorruptHistory)
		}
		e, err := l.entry(ctx, reviewID, rec, prev)
		if err != nil {
			return nil, fmt.Errorf("%s revision %d: %w", stream, rec.Revision, err)
		}
		log.Events = append(log.Events, e)
		prev = e.Metadata.Hash
	}
	return log, nil
}

// Verify checks the side stream's hash chain as History.Verify checks a
// review's: a *ChainError matching ErrTampered at the first break.
func (c *SideLog) Verify() error {
	return verifyChain(c.ReviewID, c.stream, c.Events)
}
