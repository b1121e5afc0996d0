package dbtest

import (
	"testing"
	"time"
)

// TestWaitSlot: n slots are handed out once each, across processes as
// within one (the lock is per open file), and freed by release.
func TestWaitSlot(t *testing.T) {
	dir := t.TempDir()
	var releases []func()
	for range 2 {
		r, err := waitSlot(dir, 2, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		releases = append(releases, r)
	}
	if _, err := waitSlot(dir, 2, 100*time.Millisecond); err == nil {
		t.Fatal("a third slot out of two")
	}
	releases[0]()
	r, err := waitSlot(dir, 2, time.Second)
	if err != nil {
		t.Fatalf("a released slot is not handed out again: %v", err)
	}
	r()
	releases[1]()
}
