package eventstore

import "fmt"

// ValidateAppend checks the arguments of an Append the same way in every
// backend: the stream is named, there is at least one event, every event has
// a type and an ID in canonical lowercase UUID form
// (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), and no ID appears twice. Failures
// match ErrInvalidEvent.
func ValidateAppend(stream string, events []EventData) error {
	if stream == "" {
		return fmt.Errorf("append: empty stream name: %w", ErrInvalidEvent)
	}
	if len(events) == 0 {
		return fmt.Errorf("append to %s: no events: %w", stream, ErrInvalidEvent)
	}
	ids := make(map[string]bool, len(events))
	for i, e := range events {
		if e.Type == "" {
			return fmt.Errorf("append to %s: event %d has no type: %w", stream, i, ErrInvalidEvent)
		}
		if !isUUID(e.ID) {
			return fmt.Errorf("append to %s: event %d: id %q is not a lowercase UUID: %w", stream, i, e.ID, ErrInvalidEvent)
		}
		if ids[e.ID] {
			return fmt.Errorf("append to %s: event %s twice in one append: %w", stream, e.ID, ErrInvalidEvent)
		}
		ids[e.ID] = true
	}
	return nil
}

// ValidateAppendMulti checks the arguments of an AppendMulti the same way in
// every backend: there is at least one stream, each stream's part passes
// ValidateAppend, no stream appears twice, and no event ID appears twice in
// the whole call (an ID belongs to one event of one stream). Failures match
// ErrInvalidEvent and name the part by its index.
func ValidateAppendMulti(appends []StreamAppend) error {
	if len(appends) == 0 {
		return fmt.Errorf("append to several streams: no streams: %w", ErrInvalidEvent)
	}
	streams := make(map[string]int, len(appends))
	ids := make(map[string]string)
	for i, a := range appends {
		if err := ValidateAppend(a.Stream, a.Events); err != nil {
			return fmt.Errorf("append to several streams: part %d: %w", i, err)
		}
		if j, twice := streams[a.Stream]; twice {
			return fmt.Errorf("append to several streams: %s in parts %d and %d: %w", a.Stream, j, i, ErrInvalidEvent)
		}
		streams[a.Stream] = i
		for _, e := range a.Events {
			if other, twice := ids[e.ID]; twice {
				return fmt.Errorf("append to several streams: event %s in %s and %s: %w", e.ID, other, a.Stream, ErrInvalidEvent)
			}
			ids[e.ID] = a.Stream
		}
	}
	return nil
}

func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
}
