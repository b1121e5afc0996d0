package projections

import "time"

// sloSpan is where the rows of a window [from, to] of the SLO counters
// are read: its whole hours, [hourFrom, hourTo), from the hourly rollups,
// and the minutes before and after them from the minute tables. Both are
// written in the same batch (sloGrains), so the sums are the minutes'
// exactly; 30 days read 720 hour rows per class and bucket, not 43,200.
// A window without a whole hour reads minutes only (hourFrom = hourTo).
type sloSpan struct {
	from, to, hourFrom, hourTo time.Time
}

func (db *DB) spanOf(from, to time.Time) sloSpan {
	if db.minutesOnly {
		return sloSpan{from: from, to: to, hourFrom: from, hourTo: from}
	}
	hf, ht := from.Truncate(time.Hour), to.Truncate(time.Hour)
	if hf.Before(from) {
		hf = hf.Add(time.Hour)
	}
	if !hf.Before(ht) {
		hf, ht = from, from
	}
	return sloSpan{from: from, to: to, hourFrom: hf, hourTo: ht}
}

// args are the parameters of spanRows' SQL: $1..$4 the span, $5 the class
// (every class when empty).
func (s sloSpan) args(class string) []any { return []any{s.from, s.to, s.hourFrom, s.hourTo, class} }

// spanRows returns a FROM item, aliased r, of cols from the minute table
// and the hour table for the span of args: cols must exist in both
// (content_class, and the counters; not the time column).
func spanRows(cols, minutes, hours string) string {
	return `(SELECT ` + cols + ` FROM ` + minutes + `
			WHERE (minute >= $1 AND minute < $3 OR minute >= $4 AND minute <= $2) AND ($5 = '' OR content_class = $5)
		UNION ALL
		SELECT ` + cols + ` FROM ` + hours + `
			WHERE hour >= $3 AND hour < $4 AND ($5 = '' OR content_class = $5)) r`
}
