// Package domain is the review model: the review aggregate rebuilt from its
// events, the commands that decide which events come next, the per-class
// policy and the retry arithmetic.
//
// It imports only the standard library, does no I/O and never reads the
// clock: every command takes the current time as an argument, and random
// jitter comes from a source the caller injects.
package domain
