package ledger

// SetKept bounds how many snapshots l keeps, for tests of what dropping
// one does.
func SetKept(l *Ledger, n int) { l.cache.size = n }

// SetGone bounds how many drops of relied-on snapshots l remembers.
func SetGone(l *Ledger, n int) { l.cache.goneCap = n }

// Relied reports whether l's watcher relied on a write of the review in
// flight.
func Relied(l *Ledger, id string) bool {
	l.cache.mu.Lock()
	defer l.cache.mu.Unlock()
	return l.cache.writing[id].relied
}

// Vouched reports whether the snapshot l keeps of the review is one the
// watcher relied on for not moving its epoch.
func Vouched(l *Ledger, id string) bool {
	l.cache.mu.Lock()
	defer l.cache.mu.Unlock()
	el, ok := l.cache.byID[id]
	return ok && el.Value.(*cached).vouched
}
