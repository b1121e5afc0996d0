// Package notify sends decision webhooks: when a review reaches
// manual_review or a final state (accepted, rejected), and again when a
// moderator decides it, reviewledger POSTs an event to the platform's URL,
// signed as the Standard Webhooks specification describes.
//
// The notifier follows the ledger's global order with a checkpoint of its
// own, as a projection does (follow.go): each batch of events it reads
// becomes deliveries, rows of notify_delivery inserted in the same
// transaction that moves the checkpoint, so no decision is lost across a
// restart and none is made twice. The sender (send.go) posts the due
// deliveries, a bounded number at once, each within a timeout, and retries
// a failed one with exponential backoff and jitter, honouring Retry-After,
// for a configurable window (backoff.go). A review's deliveries go in
// revision order: a later one waits until the earlier one was delivered.
// Waiting deliveries are rows, not goroutines, so a slow or dead receiver
// costs the connections and goroutines of Concurrency and nothing more.
//
// One process at a time runs the notifier, elected by a PostgreSQL advisory
// lock held on a connection of its own (lock.go); the others wait and take
// over when it dies. DB (deliveries.go) lists deliveries and asks for
// redeliveries, for the admin routes of the HTTP API.
//
// Delivery is at least once: a receiver de-duplicates by webhook-id, which
// is the ID of the ledger event that made the change, the same on every
// attempt and every redelivery.
package notify
