package ledger

// SetKept bounds how many snapshots l keeps, for tests of what dropping
// one does.
func SetKept(l *Ledger, n int) { l.cache.size = n }
