package notify

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// nextAttempt is when a delivery that failed at now is tried again, and
// false when it is given up: its retry window, from since for retryFor,
// is over. The last attempt is made when the window ends.
func nextAttempt(now, since time.Time, retryFor, wait time.Duration) (time.Time, bool) {
	end := since.Add(retryFor)
	if !now.Before(end) {
		return time.Time{}, false
	}
	next := now.Add(wait)
	if next.After(end) {
		next = end
	}
	return next, true
}

// maxRetryAfter bounds the Retry-After honoured, against a value so large
// it is surely a mistake.
const maxRetryAfter = 48 * time.Hour

// retryAfter reads a Retry-After header: seconds, or an HTTP date; zero
// when absent or unreadable.
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n <= 0 {
			return 0
		}
		d = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}
