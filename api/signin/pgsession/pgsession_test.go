package pgsession_test

import (
	"testing"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/internal/storetest"
	"github.com/reviewledger/reviewledger/api/signin/pgsession"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// TestStore: two stores on one database are two API processes.
func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) (signin.Store, signin.Store) {
		url := dbtest.URL(t)
		return pgsession.New(dbtest.PoolOn(t, url, nil)), pgsession.New(dbtest.PoolOn(t, url, nil))
	})
}
