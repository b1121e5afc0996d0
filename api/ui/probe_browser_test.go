package ui

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
)

// heldProbe answers the page's session probe (GET /auth/session) with 401,
// the answer of a server that offers its OpenID Provider's sign-in to a
// browser without a session, but only when the test lets it: each probe
// takes a release channel from its queue and answers once that closes.
type heldProbe struct {
	releases chan chan struct{}
	done     chan struct{} // closed at the test's end: nothing waits then
}

func (h *heldProbe) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var release chan struct{}
	select {
	case release = <-h.releases:
	case <-h.done:
		return
	case <-r.Context().Done():
		return
	}
	select {
	case <-release:
	case <-h.done:
		return
	case <-r.Context().Done():
		return
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write([]byte(`{"type":"https://reviewledger.dev/problems/unauthenticated","title":"No session","status":401}`))
}

// hold waits until the page has sent its probe and returns the function
// that lets it be answered.
func (h *heldProbe) hold() (answer func()) {
	release := make(chan struct{})
	h.releases <- release
	return func() { close(release) }
}

// The sign-in form shows while the page asks the server for a session: a
// token typed meanwhile is kept when the answer (no session) comes, not
// wiped halfway, and a sign-in finished before the answer stands.
func TestBrowserSignInWhileTheSessionProbeIsUnderWay(t *testing.T) {
	fake := uitest.NewFakeAPI(time.Now)
	fake.AddToken(auditorToken, "auditor", "audrey")
	fake.SetSLO("1h", newFakeSLO(1234, 1230, 4, 0, 850, 4200, 12800, 0, 0))
	fake.SetSLO("24h", newFakeSLO(28000, 27860, 120, 0, 700, 3100, 9900, 0, 0))
	probe := &heldProbe{releases: make(chan chan struct{}), done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.Handle("GET /auth/session", probe)
	mux.Handle("/", serveFake(fake))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(probe.done) }) // before the server closes

	page := uitest.Start(t, srv.URL)
	run := uitest.InOrder(t)
	offered := `() => !document.getElementById('oidc-signin').hidden` // the probe's answer was read

	run("a token typed before the answer is kept", func(t *testing.T) {
		p := page.T(t)
		p.Open("/")
		answer := probe.hold()
		p.Type("#token", auditorToken)
		answer()
		p.WaitFor("the probe's answer read", offered)
		if got := uitest.Evaluate[string](p, `document.getElementById('token').value`); got != auditorToken {
			t.Fatalf("the token field holds %q once the probe answered, want the token typed", got)
		}
		if got := uitest.Evaluate[string](p, `document.activeElement.id`); got != "token" {
			t.Fatalf("focus moved to %q while the token was typed, want it kept on the token field", got)
		}
		p.Press(kb.Enter)
		p.WaitText("#who", "audrey")
	})

	run("a sign-in finished before the answer stands", func(t *testing.T) {
		p := page.T(t)
		p.Click("#signout")
		p.WaitText("#signin-error", "signed out")
		p.Open("/")
		answer := probe.hold()
		p.SignIn(auditorToken)
		p.WaitText("#who", "audrey")
		answer()
		p.WaitFor("the probe's answer read", offered)
		p.WaitText("#who", "audrey")
		if uitest.Evaluate[bool](p, `!document.getElementById('signin-view').closest('[hidden]')`) {
			t.Fatal("the probe's answer put the sign-in form back over a signed-in page")
		}
	})
}
