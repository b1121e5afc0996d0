package signin_test

import (
	"testing"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/internal/storetest"
)

func TestMemoryStore(t *testing.T) {
	storetest.Run(t, func(*testing.T) (signin.Store, signin.Store) {
		s := signin.NewMemoryStore()
		return s, s
	})
}
