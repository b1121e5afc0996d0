package pgwork_test

import (
	"testing"

	"github.com/reviewledger/reviewledger/api/engine/work/internal/worktest"
	"github.com/reviewledger/reviewledger/api/engine/work/pgwork"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
	"github.com/reviewledger/reviewledger/eventstore/pgstore"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// On pgstore in the same database: appends and changes in one transaction.
func TestConformance(t *testing.T) {
	worktest.Run(t, func(t *testing.T) worktest.Subject {
		pool := dbtest.Pool(t)
		events := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(events.Close)
		s := pgwork.New(pool, events)
		if !s.Atomic() {
			t.Fatal("pgwork on pgstore is not atomic")
		}
		return worktest.Subject{Store: s, Ledger: s.Ledger(ledger.GroupCommit{})}
	})
}

// On pgstore on a pool that sends every argument as untyped text (pgx's
// simple protocol, which a connection string chooses with
// default_query_exec_mode=simple_protocol).
func TestConformanceSimpleProtocol(t *testing.T) {
	worktest.Run(t, func(t *testing.T) worktest.Subject {
		pool := dbtest.PoolWith(t, dbtest.SimpleProtocol)
		events := pgstore.New(pool, pgstore.Config{})
		t.Cleanup(events.Close)
		s := pgwork.New(pool, events)
		return worktest.Subject{Store: s, Ledger: s.Ledger(ledger.GroupCommit{})}
	})
}

// On a ledger in another store (as with KurrentDB): the writes ordered
// around the append.
func TestConformanceOrdered(t *testing.T) {
	worktest.Run(t, func(t *testing.T) worktest.Subject {
		s := pgwork.New(dbtest.Pool(t), memstore.New())
		if s.Atomic() {
			t.Fatal("pgwork on another store claims to be atomic")
		}
		return worktest.Subject{Store: s, Ledger: s.Ledger(ledger.GroupCommit{})}
	})
}
