package memstore_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/eventstoretest"
	"github.com/reviewledger/reviewledger/eventstore/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	eventstoretest.Run(t, func(t *testing.T) eventstore.Store { return memstore.New() })
}
