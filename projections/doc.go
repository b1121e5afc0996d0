// Package projections keeps the PostgreSQL read models of the ledger:
// review_summary, manual_queue and the SLO buckets.
//
// The projections a process runs share their batches: the runner reads the
// store's global order (eventstore.Store.ReadAll) once per batch and applies
// it to every projection at that checkpoint in one transaction, which also
// moves their checkpoints, so every event takes effect exactly once; a
// projection behind the others catches up on its own and then joins them.
// Each projection is given only the events it uses: the others cost it no
// query. One process at a time runs each projection, elected by a
// PostgreSQL advisory lock. Rebuild recomputes a projection from position
// zero into fresh tables and swaps them in
// atomically. DB answers the queries the API needs and records the one fact
// that is not a ledger event: moderator claims. Conflicting completions are
// ledger events of the reviews' conflict streams, which the SLO projection
// counts like any other event.
//
// The event store may be any backend; only the read models live in
// PostgreSQL.
package projections
