package notify

import (
	"net/http"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

func TestNextAttempt(t *testing.T) {
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const window = time.Hour
	for _, tc := range []struct {
		name  string
		now   time.Time
		wait  time.Duration
		want  time.Time
		retry bool
	}{
		{"within the window", since.Add(time.Minute), time.Minute, since.Add(2 * time.Minute), true},
		{"the last attempt is at the window's end", since.Add(59 * time.Minute), 10 * time.Minute, since.Add(window), true},
		{"at the window's end: given up", since.Add(window), time.Second, time.Time{}, false},
		{"past it: given up", since.Add(2 * window), time.Second, time.Time{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, retry := nextAttempt(tc.now, since, window, tc.wait)
			if got != tc.want || retry != tc.retry {
				t.Errorf("nextAttempt = %s, %v; want %s, %v", got, retry, tc.want, tc.retry)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 7 ", 7 * time.Second},
		{"0", 0},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Hour).Format(http.TimeFormat), 0},
		{"999999999", maxRetryAfter},
	} {
		h := http.Header{}
		if tc.value != "" {
			h.Set("Retry-After", tc.value)
		}
		if got := retryAfter(h, now); got != tc.want {
			t.Errorf("Retry-After %q: %s, want %s", tc.value, got, tc.want)
		}
	}
}

func TestEventType(t *testing.T) {
	for _, tc := range []struct {
		from, to domain.State
		want     string
	}{
		{domain.StatePending, domain.StateAccepted, EventDecided},
		{domain.StatePending, domain.StateRejected, EventDecided},
		{domain.StatePending, domain.StateManualReview, EventManualReview},
		{domain.StateManualReview, domain.StateAccepted, EventDecided},
		{domain.StateManualReview, domain.StateRejected, EventDecided},
		{domain.StateManualReview, domain.StateManualReview, ""}, // one approval of several
		{domain.StatePending, domain.StatePending, ""},           // a held accept, an attempt
		{"", domain.StatePending, ""},
	} {
		if got := eventType(tc.from, tc.to); got != tc.want {
			t.Errorf("%s -> %s: %q, want %q", tc.from, tc.to, got, tc.want)
		}
	}
}
