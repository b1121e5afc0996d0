package memwork_test

import (
	"testing"

	"github.com/reviewledger/reviewledger/api/engine/work/internal/worktest"
	"github.com/reviewledger/reviewledger/api/engine/work/memwork"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

func TestConformance(t *testing.T) {
	worktest.Run(t, func(*testing.T) worktest.Subject {
		s := memwork.New(memstore.New())
		return worktest.Subject{Store: s, Ledger: s.Ledger(ledger.GroupCommit{})}
	})
}
