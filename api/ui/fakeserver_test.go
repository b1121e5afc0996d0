package ui

import (
	"net/http"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
)

// serveFake serves the page (Handler) beside the fake's API routes, as the
// real server mounts Handler beside its own.
func serveFake(fake *uitest.FakeAPI) http.Handler {
	mux := http.NewServeMux()
	page := Handler()
	mux.Handle("GET /{$}", page)
	mux.Handle("GET "+Prefix, page)
	mux.Handle("/", fake.Handler())
	return mux
}
