package signin

import (
	"testing"
	"time"
)

// TestSchedule: a session is checked at the provider after the refresh
// interval or at its ID token's expiry, whichever comes first; without a
// refresh token, at the expiry.
func TestSchedule(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		refresh string
		expiry  time.Time
		want    time.Time
	}{
		{"interval first", "rt", now.Add(time.Hour), now.Add(5 * time.Minute)},
		{"expiry first", "rt", now.Add(2 * time.Minute), now.Add(2 * time.Minute)},
		{"no expiry", "rt", time.Time{}, now.Add(5 * time.Minute)},
		{"no refresh token", "", now.Add(time.Hour), now.Add(time.Hour)},
	} {
		r := Record{RefreshToken: tc.refresh}
		r.schedule(now, tc.expiry, 5*time.Minute)
		if !r.CheckAt.Equal(tc.want) || !r.Expiry.Equal(tc.expiry) {
			t.Errorf("%s: check at %s, expiry %s; want %s", tc.name, r.CheckAt, r.Expiry, tc.want)
		}
	}
}
