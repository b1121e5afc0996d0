// Package projections keeps the PostgreSQL read models of the ledger:
// review_summary, manual_queue and the SLO buckets.
//
// Each projection reads the store's global order (eventstore.Store.ReadAll)
// from its checkpoint, in batches, and commits its rows together with its new
// checkpoint in one transaction, so every event takes effect exactly once. A
// Runner keeps projections current; one process at a time runs each
// projection, elected by a PostgreSQL advisory lock. Rebuild recomputes a
// projection from position zero into fresh tables and swaps them in
// atomically. DB answers the queries the API needs and records the two facts
// that are not ledger events: moderator claims and conflicting completions.
//
// The event store may be any backend; only the read models live in
// PostgreSQL.
package projections
