package pgwork

import (
	"context"
	"fmt"
	"time"

	"github.com/reviewledger/reviewledger/api/engine/work"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// Commit implements ledger.Committer. With pgstore, every append and every
// Change of the batch are one transaction and one round trip: the changes
// are set-based statements run after the events are inserted, each row
// guarded by its stream's last event having been inserted by this very
// transaction, so a stream that failed its check changes nothing (and,
// should pgstore fall back to appending stream by stream, each
// transaction applies only its own streams' changes). With another ledger,
// see commitOrdered.
func (s *Store) Commit(ctx context.Context, appends []eventstore.StreamAppend, effects []*work.Change) ([]eventstore.StreamResult, error) {
	changes, err := changesOf(appends, effects)
	if err != nil {
		return nil, err
	}
	if s.pg == nil {
		return s.commitOrdered(ctx, appends, changes)
	}
	return s.pg.AppendMultiWith(ctx, appends, statements(changes)...)
}

// change is a Change with its stream and the ID of the stream's last
// event.
type change struct {
	work.Change
	stream, eventID string
	index           int // of its append
}

func changesOf(appends []eventstore.StreamAppend, effects []*work.Change) ([]change, error) {
	var out []change
	for i, c := range effects {
		if c == nil || c.Op == work.Keep {
			continue
		}
		evs := appends[i].Events
		if len(evs) == 0 {
			return nil, fmt.Errorf("pgwork: a change of %s without events", c.ReviewID)
		}
		out = append(out, change{Change: *c, stream: appends[i].Stream, eventID: evs[len(evs)-1].ID, index: i})
	}
	return out, nil
}

// written is the guard of every change: its stream's last event was
// inserted by the current transaction. An event ID is unique within its
// stream, and found through the stream's index.
const written = `EXISTS (SELECT 1 FROM event e WHERE e.stream = x.stream AND e.id = x.event_id AND e.xid = pg_current_xact_id())`

const (
	createPayloadSQL = `INSERT INTO review_payload (review_id, digest, content_type, content, stored_at)
SELECT x.review_id, x.digest, x.content_type, x.content, x.stored_at
FROM unnest($1::text[], $2::text[], $3::text[], $4::bytea[], $5::timestamptz[], $6::text[], $7::text[]::uuid[])
	AS x(review_id, digest, content_type, content, stored_at, stream, event_id)
WHERE ` + written + `
ON CONFLICT (review_id) DO UPDATE SET digest = EXCLUDED.digest, content_type = EXCLUDED.content_type,
	content = EXCLUDED.content, stored_at = EXCLUDED.stored_at`

	createWorkSQL = `INSERT INTO review_work (review_id, deadline, due_at, owner_id, lease_until)
SELECT x.review_id, x.deadline, x.due_at, nullif(x.owner_id, ''), CASE WHEN x.owner_id = '' THEN NULL ELSE x.lease_until END
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::timestamptz[], $6::text[], $7::text[]::uuid[])
	AS x(review_id, deadline, due_at, owner_id, lease_until, stream, event_id)
WHERE ` + written + `
ON CONFLICT (review_id) DO UPDATE SET deadline = EXCLUDED.deadline, due_at = EXCLUDED.due_at,
	owner_id = EXCLUDED.owner_id, lease_until = EXCLUDED.lease_until, awaiting = 0`

	parkSQL = `UPDATE review_work w SET due_at = x.until, awaiting = x.awaiting, owner_id = NULL, lease_until = NULL
FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::text[], $5::text[], $6::text[]::uuid[]) AS x(review_id, until, awaiting, owner_id, stream, event_id)
WHERE w.review_id = x.review_id AND w.owner_id = x.owner_id AND ` + written

	releaseSQL = `DELETE FROM review_work w USING unnest($1::text[], $2::text[], $3::text[]::uuid[]) AS x(review_id, stream, event_id)
WHERE w.review_id = x.review_id AND ` + written

	reopenSQL = `INSERT INTO review_work (review_id, deadline, due_at)
SELECT x.review_id, x.deadline, x.due_at
FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::text[], $5::text[]::uuid[]) AS x(review_id, deadline, due_at, stream, event_id)
WHERE ` + written + `
ON CONFLICT (review_id) DO UPDATE SET deadline = EXCLUDED.deadline, due_at = EXCLUDED.due_at,
	owner_id = NULL, lease_until = NULL, awaiting = 0`
)

// statements returns the set-based statements applying changes: one per
// kind of change present in the batch.
func statements(changes []change) []pgstore.Statement {
	var (
		create struct {
			ids, digests, types, owners, streams, events pgarray.Text
			contents                                     pgarray.Bytes
			at, deadlines, leases                        pgarray.Timestamptz
		}
		park struct {
			ids, owners, streams, events pgarray.Text
			until                        pgarray.Timestamptz
			awaiting                     pgarray.Int4
		}
		release struct{ ids, streams, events pgarray.Text }
		reopen  struct {
			ids, streams, events pgarray.Text
			deadlines, at        pgarray.Timestamptz
		}
	)
	for _, c := range changes {
		switch c.Op {
		case work.Create:
			create.ids = append(create.ids, c.ReviewID)
			create.digests = append(create.digests, c.Payload.Digest)
			create.types = append(create.types, c.Payload.ContentType)
			create.contents = append(create.contents, c.Payload.Content) // nil is sent empty
			create.at = append(create.at, c.At)
			create.deadlines = append(create.deadlines, c.Deadline)
			create.owners = append(create.owners, c.Owner)
			create.leases = append(create.leases, leaseOf(c.Change))
			create.streams, create.events = append(create.streams, c.stream), append(create.events, c.eventID)
		case work.Park:
			park.ids = append(park.ids, c.ReviewID)
			park.until = append(park.until, c.Until)
			park.awaiting = append(park.awaiting, int32(c.Awaiting))
			park.owners = append(park.owners, c.Owner)
			park.streams, park.events = append(park.streams, c.stream), append(park.events, c.eventID)
		case work.Release:
			release.ids = append(release.ids, c.ReviewID)
			release.streams, release.events = append(release.streams, c.stream), append(release.events, c.eventID)
		case work.Reopen:
			reopen.ids, reopen.streams, reopen.events = append(reopen.ids, c.ReviewID), append(reopen.streams, c.stream), append(reopen.events, c.eventID)
			reopen.deadlines, reopen.at = append(reopen.deadlines, c.Deadline), append(reopen.at, c.At)
		}
	}
	var out []pgstore.Statement
	if len(create.ids) > 0 {
		out = append(out,
			pgstore.Statement{SQL: createPayloadSQL, Args: []any{create.ids, create.digests, create.types, create.contents, create.at, create.streams, create.events}},
			pgstore.Statement{SQL: createWorkSQL, Args: []any{create.ids, create.deadlines, create.at, create.owners, create.leases, create.streams, create.events}})
	}
	if len(park.ids) > 0 {
		out = append(out, pgstore.Statement{SQL: parkSQL, Args: []any{park.ids, park.until, park.awaiting, park.owners, park.streams, park.events}})
	}
	if len(release.ids) > 0 {
		out = append(out, pgstore.Statement{SQL: releaseSQL, Args: []any{release.ids, release.streams, release.events}})
	}
	if len(reopen.ids) > 0 {
		out = append(out, pgstore.Statement{SQL: reopenSQL, Args: []any{reopen.ids, reopen.deadlines, reopen.at, reopen.streams, reopen.events}})
	}
	return out
}

// leaseOf is a Create's lease end; an unowned record has none (the column
// is set NULL), the value only fills the array.
func leaseOf(c work.Change) time.Time {
	if c.Owner == "" {
		return c.At
	}
	return c.LeaseUntil
}

// commitOrdered commits to a ledger in another store, where the events and
// the records cannot share a transaction: a Create's content and record
// (unowned, as Atomic says) are written first, with ON CONFLICT DO
// NOTHING, so a stream never exists without them; then the appends; then,
// for the streams written, the created content is made the creator's
// (replacing what a failed earlier submission left), and the other changes
// are applied; for a create that failed (the review existed), what its
// stage wrote is deleted. A crash in between leaves only records the engine checks
// against the ledger before it acts (and the sweeper clears, once past
// their deadline, when the review never came to exist).
func (s *Store) commitOrdered(ctx context.Context, appends []eventstore.StreamAppend, changes []change) ([]eventstore.StreamResult, error) {
	staged := make(map[int]stagedRows)
	for _, c := range changes {
		if c.Op != work.Create {
			continue
		}
		rows, err := s.stage(ctx, c.Change)
		if err != nil {
			return nil, err
		}
		staged[c.index] = rows
	}
	results, err := s.events.AppendMulti(ctx, appends...)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		if results[c.index].Err != nil {
			if err := s.unstage(ctx, c.ReviewID, staged[c.index]); err != nil {
				return nil, err
			}
			continue
		}
		if err := s.applyAfter(ctx, c.Change); err != nil {
			return nil, err
		}
	}
	return results, nil
}

// stagedRows says which rows a stage wrote (rather than found).
type stagedRows struct{ payload, record bool }

func (s *Store) stage(ctx context.Context, c work.Change) (stagedRows, error) {
	var rows stagedRows
	tag, err := s.pool.Exec(ctx, `INSERT INTO review_payload (review_id, digest, content_type, content, stored_at)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT (review_id) DO NOTHING`, c.ReviewID, c.Payload.Digest, c.Payload.ContentType, nonNil(c.Payload.Content), c.At)
	if err != nil {
		return rows, storeerr.Wrap(ctx, "stage content of "+c.ReviewID, err)
	}
	rows.payload = tag.RowsAffected() == 1
	tag, err = s.pool.Exec(ctx, `INSERT INTO review_work (review_id, deadline, due_at) VALUES ($1, $2, $3)
		ON CONFLICT (review_id) DO NOTHING`, c.ReviewID, c.Deadline, c.At)
	rows.record = err == nil && tag.RowsAffected() == 1
	return rows, storeerr.Wrap(ctx, "stage work of "+c.ReviewID, err)
}

// unstage deletes what a stage wrote for a review that was not created (it
// existed): the change is not applied.
func (s *Store) unstage(ctx context.Context, reviewID string, rows stagedRows) error {
	if rows.record {
		if err := s.Done(ctx, reviewID); err != nil {
			return err
		}
	}
	if rows.payload {
		_, err := s.pool.Exec(ctx, `DELETE FROM review_payload WHERE review_id = $1`, reviewID)
		return storeerr.Wrap(ctx, "unstage content of "+reviewID, err)
	}
	return nil
}

func (s *Store) applyAfter(ctx context.Context, c work.Change) error {
	switch c.Op {
	case work.Create:
		content := nonNil(c.Payload.Content)
		if _, err := s.pool.Exec(ctx, `UPDATE review_payload SET digest = $2, content_type = $3, content = $4, stored_at = $5
			WHERE review_id = $1 AND digest <> $2`, c.ReviewID, c.Payload.Digest, c.Payload.ContentType, content, c.At); err != nil {
			return storeerr.Wrap(ctx, "store content of "+c.ReviewID, err)
		}
		_, err := s.pool.Exec(ctx, `UPDATE review_work SET deadline = $2 WHERE review_id = $1`, c.ReviewID, c.Deadline)
		return storeerr.Wrap(ctx, "store work of "+c.ReviewID, err)
	case work.Park:
		return s.Park(ctx, c.Owner, c.ReviewID, c.Until, c.Awaiting)
	case work.Release:
		return s.Done(ctx, c.ReviewID)
	case work.Reopen:
		_, err := s.pool.Exec(ctx, `INSERT INTO review_work (review_id, deadline, due_at) VALUES ($1, $2, $3)
			ON CONFLICT (review_id) DO UPDATE SET deadline = EXCLUDED.deadline, due_at = EXCLUDED.due_at,
				owner_id = NULL, lease_until = NULL, awaiting = 0`, c.ReviewID, c.Deadline, c.At)
		return storeerr.Wrap(ctx, "reopen work of "+c.ReviewID, err)
	}
	return nil
}
