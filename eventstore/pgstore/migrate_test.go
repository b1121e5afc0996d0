package pgstore_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
	"github.com/reviewledger/reviewledger/migrations"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// partitioning are the migrations that partition the ledger, index its
// partitions by stream and by xid, and drop their index on id.
var partitioning = []int{2, 3, 4, 5, 6, 7}

// legacyAppendSQL is the append statement of the ledger before it was
// partitioned: the events after the stream's last revision, read from the
// (stream, revision) index, if the expected revision holds.
const legacyAppendSQL = `
INSERT INTO event (stream, revision, id, type, data, metadata)
SELECT $1, cur.rev + e.ord, e.id, e.type, e.data, e.metadata
FROM (SELECT coalesce(max(revision), -1) AS rev FROM event WHERE stream = $1) AS cur,
	unnest($2::text[]::uuid[], $3::text[], $4::bytea[], $5::bytea[]) WITH ORDINALITY AS e(id, type, data, metadata, ord)
WHERE $6::bigint IS NULL OR cur.rev = $6::bigint`

// TestMigrateAnExistingLedger writes a ledger as the release before the
// partitioning did, with every other migration applied, then applies the
// partitioning: every event reads back as it was stored, at its position;
// each stream's revisions go on from its last; appends at stale expected
// revisions still fail; new events sort after the old ones.
func TestMigrateAnExistingLedger(t *testing.T) {
	t.Parallel()
	ctx := ctxFor(t)
	legacy := dbtest.EmptySchema(t, "legacy")
	partitioned := func(m migrations.Migration) bool { return slices.Contains(partitioning, m.Version) }
	dbtest.Apply(t, legacy, func(m migrations.Migration) bool { return !partitioned(m) })

	// 20 streams, their events appended one to three at a time.
	last := map[string]int64{}
	for i := range 60 {
		stream := fmt.Sprintf("review-%d", i%20)
		evs := newEvents(1+i%3, fmt.Sprintf("T%d", i%4))
		var ids, types []string
		var data, meta [][]byte
		for _, e := range evs {
			ids, types = append(ids, e.ID), append(types, e.Type)
			data, meta = append(data, e.Data), append(meta, e.Metadata)
		}
		var expected *int64
		if rev, ok := last[stream]; ok {
			expected = &rev
		}
		tag, err := legacy.Exec(ctx, legacyAppendSQL, stream, ids, types, data, meta, expected)
		if err != nil || tag.RowsAffected() != int64(len(evs)) {
			t.Fatalf("legacy append to %s: %v (%d rows)", stream, err, tag.RowsAffected())
		}
		if expected == nil {
			last[stream] = int64(len(evs)) - 1
		} else {
			last[stream] += int64(len(evs))
		}
	}
	before := pgstore.New(legacy, pgstore.Config{})
	stored := readAll(t, before, eventstore.Start, 120)
	before.Close()

	if n := dbtest.Apply(t, legacy, partitioned); n != len(partitioning) {
		t.Fatalf("applied %d migrations of the partitioning, want %d", n, len(partitioning))
	}
	s := pgstore.New(legacy, pgstore.Config{})
	t.Cleanup(s.Close)
	if got := readAll(t, s, eventstore.Start, len(stored)); !reflect.DeepEqual(got, stored) {
		t.Fatalf("after the migration ReadAll gives %d events, want the %d stored, as they were", len(got), len(stored))
	}
	var inFirst int
	if err := legacy.QueryRow(ctx, `SELECT count(*) FROM event_p0`).Scan(&inFirst); err != nil || inFirst != len(stored) {
		t.Fatalf("event_p0 holds %d events (%v), want the %d stored", inFirst, err, len(stored))
	}
	maxSeq := stored[len(stored)-1].Position.Prepare
	for stream, rev := range last {
		got, err := s.ReadStream(ctx, stream, 0)
		if err != nil || len(got) != int(rev)+1 || got[rev].Revision != uint64(rev) {
			t.Fatalf("%s: %d events (%v), want revisions 0 to %d", stream, len(got), err, rev)
		}
		var wev *eventstore.WrongExpectedVersionError
		if _, err := s.Append(ctx, stream, eventstore.Exact(uint64(rev)-1), newEvents(1, "Stale")...); !errors.As(err, &wev) || wev.Actual != uint64(rev) {
			t.Fatalf("%s at a stale revision: %v, want the stream at %d", stream, err, rev)
		}
		if _, err := s.Append(ctx, stream, eventstore.NoStream, newEvents(1, "Stale")...); !errors.Is(err, eventstore.ErrWrongExpectedVersion) {
			t.Fatalf("%s as a new stream: %v, want ErrWrongExpectedVersion", stream, err)
		}
		res := mustAppend(t, s, stream, eventstore.Exact(uint64(rev)), newEvents(2, "After")...)
		if res.NextRevision != uint64(rev)+2 || res.Position.Prepare <= maxSeq {
			t.Fatalf("%s: appended up to revision %d at seq %d, want %d after seq %d", stream, res.NextRevision, res.Position.Prepare, rev+2, maxSeq)
		}
	}
	// seq is still GENERATED ALWAYS: a value given for it is refused.
	if _, err := legacy.Exec(ctx, `INSERT INTO event (seq, stream, revision, id, type, data, metadata) VALUES (1, 'x', 0, gen_random_uuid(), 'T', '', '')`); storeerr.Code(err) != "428C9" { // generated_always
		t.Fatalf("an explicit seq after the migration: %v, want it refused", err)
	}
	if used := checkLedger(t, legacy); used < 1 {
		t.Fatalf("events in %d partitions", used)
	}
	// The partition that held events when 0005 ran keeps its (stream,
	// revision) index; the ones still empty took the plain one.
	for p, def := range streamIndexes(t, legacy) {
		want := plainStreamIndex(p)
		if p == "event_p0" {
			want = "CREATE UNIQUE INDEX event_p0_stream_revision_key ON event_p0 USING btree (stream, revision)"
		}
		if def != want {
			t.Errorf("partition %s indexes its streams by %q, want %q", p, def, want)
		}
	}
	// The ledger held events when 0006 ran: it keeps its primary key (xid,
	// seq), in every partition, those created since included.
	execAll(t, legacy, `SELECT event_partitions_ensure(4)`)
	if !hasPrimaryKey(t, legacy) {
		t.Error("the ledger with events lost its primary key in 0006")
	}
	checkOrderIndexes(t, legacy, primaryKey)
	// 0007 dropped the index on id of the partition holding the events,
	// and the partitions created since have none.
	if got := idIndexes(t, legacy); len(got) > 0 {
		t.Errorf("indexes on id after 0007: %v, want none", got)
	}
}
