package ledger

// SetKept bounds how many snapshots l keeps, for tests of what dropping
// one does.
func SetKept(l *Ledger, n int) { l.cache.size = n }

// SetGone bounds how many drops of relied-on snapshots l remembers.
func SetGone(l *Ledger, n int) { l.cache.goneCap = n }
