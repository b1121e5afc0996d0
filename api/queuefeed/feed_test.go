package queuefeed

import (
	"errors"
	"testing"

	"github.com/reviewledger/reviewledger/eventstore"
)

func TestIDRoundTrip(t *testing.T) {
	for _, p := range []eventstore.Position{{}, {Commit: 1, Prepare: 1}, {Commit: 18446744073709551615, Prepare: 7}} {
		got, err := ParseID(FormatID(p))
		if err != nil || got != p {
			t.Errorf("%v: parsed back as %v, %v", p, got, err)
		}
	}
	for _, id := range []string{"", "12", "1/2", "a-1", "1-", "-1", "1-2-3", "-1-2"} {
		if _, err := ParseID(id); !errors.Is(err, ErrBadID) {
			t.Errorf("ParseID(%q) = %v, want ErrBadID", id, err)
		}
	}
}
