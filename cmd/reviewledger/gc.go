package main

import (
	"log/slog"
	"runtime/debug"
)

// serveGCPercent is the collector's target for serve when the operator
// sets neither GOGC nor GOMEMLIMIT: a review allocates about 26 KB that
// lives for milliseconds over a small live heap, so Go's default of 100
// collects very often; at 200 the server spent about a tenth less CPU per
// review in the end-to-end benchmark, for about 8 MiB more RSS
// (docs/changelog.md, the second pass).
const serveGCPercent = 200

// tuneGC sets serveGCPercent unless the environment says how to collect
// (getenv is os.Getenv), and logs what it chose.
func tuneGC(getenv func(string) string, log *slog.Logger) {
	if getenv("GOGC") != "" || getenv("GOMEMLIMIT") != "" {
		return
	}
	debug.SetGCPercent(serveGCPercent)
	log.Debug("garbage collector target set", "gogc", serveGCPercent)
}
