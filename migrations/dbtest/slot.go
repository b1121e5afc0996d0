package dbtest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The server's connections are shared by every test binary that go test
// runs at once (one per package, as many as -p allows) and by the other
// programs using the server; a stock PostgreSQL allows 100. So test
// databases are handed out under a machine-wide limit: at most Slots of
// them are in use at once, counted across processes with a lock file per
// slot. A test that already holds a slot (it asks for a second database),
// or whose parent test does, takes no other: a parent holding a slot while
// its subtests wait for one could otherwise wait for itself.

// DefaultSlots is the number of test databases in use at once when
// TEST_DATABASE_SLOTS is not set. With the pools tests open on them (at
// most MaxConns each, about a dozen for a served process) it keeps a run
// well inside a stock server's 100 connections.
const DefaultSlots = 4

// slotWait bounds how long a test waits for a slot. Past it the test goes
// on without one and says so, rather than hang a run whose tests hold
// slots while they wait for more (a parent test and its subtests).
const slotWait = 5 * time.Minute

var (
	slotMu   sync.Mutex
	slotHeld = make(map[string]bool) // names of the tests holding a slot
)

// slots returns the configured number of slots.
func slots() int {
	if n, err := strconv.Atoi(os.Getenv("TEST_DATABASE_SLOTS")); err == nil && n > 0 {
		return n
	}
	return DefaultSlots
}

// acquireSlot waits for a slot for tb, released in tb.Cleanup.
func acquireSlot(tb testing.TB, server string) {
	tb.Helper()
	name := tb.Name()
	slotMu.Lock()
	held := false
	for n := range slotHeld {
		if n == name || strings.HasPrefix(name, n+"/") {
			held = true
		}
	}
	if !held {
		slotHeld[name] = true
	}
	slotMu.Unlock()
	if held {
		return
	}
	sum := sha256.Sum256([]byte(server))
	dir := filepath.Join(os.TempDir(), "reviewledger-dbtest-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("dbtest: slot directory: %v", err)
	}
	release, err := waitSlot(dir, slots(), slotWait)
	if err != nil {
		tb.Logf("dbtest: %v; going on without a slot", err)
		release = func() {}
	}
	tb.Cleanup(func() {
		release()
		slotMu.Lock()
		delete(slotHeld, name)
		slotMu.Unlock()
	})
}

// waitSlot takes the first free one of n slot files in dir, polling until
// limit has passed.
func waitSlot(dir string, n int, limit time.Duration) (release func(), err error) {
	deadline := time.Now().Add(limit)
	for {
		for i := range n {
			if release, ok, err := tryLock(filepath.Join(dir, fmt.Sprintf("slot-%d", i))); err != nil {
				return nil, err
			} else if ok {
				return release, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("all %d test database slots busy for %s", n, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
