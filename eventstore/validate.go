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
