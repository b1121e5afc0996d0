package pgstore

// SetAfterCombined makes f run between the combined insert of an
// AppendMultiWith and the resolution of the streams it did not write, so
// that a test can commit a racing append exactly there.
func (s *Store) SetAfterCombined(f func()) { s.afterCombined = f }

// HeadSQL is Head's statement, for a test of its plan.
const HeadSQL = headSQL

// ReadAllSQL is ReadAll's statement, for a test of its plan.
const ReadAllSQL = readAllSQL

// AppendMultiSQL is AppendMulti's statement, for a test of its plan.
const AppendMultiSQL = appendMultiSQL

// ReadStreamSQL is ReadStream's statement, for a test of its plan.
const ReadStreamSQL = readStreamSQL
