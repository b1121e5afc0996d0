package notify

import (
	"errors"

	"github.com/reviewledger/reviewledger/eventstore/pglock"
	"github.com/reviewledger/reviewledger/eventstore/storeerr"
)

// lockKey is the advisory lock electing the one active notifier.
const lockKey int64 = 0x726c6e6f74696679 // "rlnotify"

// LockKey is the advisory lock the active notifier holds, for telling who
// it is (pglock.Holders).
const LockKey = lockKey

// unavailable reports whether err says the database could not be used for
// a while (storeerr.Unavailable), or the notifier's lock session was lost
// with it: the notifier retries either way, but only the rest is worth an
// error in the log.
func unavailable(err error) bool {
	return storeerr.Unavailable(err) || errors.Is(err, pglock.ErrLost)
}
