// Package projections keeps the PostgreSQL read models of the ledger:
// review_summary, manual_queue and the SLO buckets.
//
// Each projection reads the store's global order (eventstore.Store.ReadAll)
// from its checkpoint, in batches, and commits its rows together with its new
// checkpoint in one transaction, so every event takes effect exactly once. A
// Runner keeps projections current; one process at a time runs each
// projection, elected by a PostgreSQL advisory lock. Rebuild recomputes a
// projection from position zero into fresh tables and swaps them in
// atomically. DB answers the queries the API needs and records the one fact
// that is not a ledger event: moderator claims. Conflicting completions are
// ledger events of the reviews' conflict streams, which the SLO projection
// counts like any other event.
//
// The event store may be any backend; only the read models live in
// PostgreSQL.
package projections
