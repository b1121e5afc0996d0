package httpapi

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/pgsession"
	"github.com/reviewledger/reviewledger/api/signin/signintest"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

// sessionHarness serves the API on a loopback port with the UI's sign-in
// through a real OpenID Provider, on a clock a test moves forward.
type sessionHarness struct {
	*harness
	op       *signintest.Provider
	sessions *signin.Sessions
	url      string
	skew     atomic.Int64 // nanoseconds the clock is ahead
}

func newSessionHarness(t *testing.T) *sessionHarness {
	t.Helper()
	return startSessionHarness(t, signintest.Start(t, providerUsers...), nil, "")
}

// startSessionHarness serves the API with the sign-in of op, its sessions
// in store (memory when nil); the provider sends browsers back to
// callbackBase, this server's own URL when empty.
func startSessionHarness(t *testing.T, op *signintest.Provider, store signin.Store, callbackBase string) *sessionHarness {
	t.Helper()
	sh := &sessionHarness{op: op}
	var handler atomic.Pointer[http.Handler]
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	sh.url = "http://" + srv.Listener.Addr().String()
	if callbackBase == "" {
		callbackBase = sh.url
	}
	now := func() time.Time { return time.Now().Add(time.Duration(sh.skew.Load())) }
	v, err := signin.NewVerifier(t.Context(), signin.Config{
		Issuer: sh.op.Issuer, ClientID: signintest.ClientID, ClientSecret: signintest.ClientSecret, HTTPClient: sh.op.Client, Now: now,
		RoleMap: map[string][]string{"moderator": {"mods"}, "auditor": {"audit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := signin.NewSessions(t.Context(), v, store, signin.SessionConfig{RedirectURL: callbackBase + signin.PathCallback, RefreshInterval: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	sh.sessions = sessions
	sh.harness = newHarness(t, func(_ *Config, d *Deps) { d.Tokens, d.Sessions = v, sessions })
	h := sh.srv.Handler()
	handler.Store(&h)
	srv.Start()
	t.Cleanup(srv.Close)
	return sh
}

// browser is a client with a cookie jar, as a browser keeps cookies.
type browser struct {
	t    *testing.T
	c    *http.Client
	csrf string
}

func (sh *sessionHarness) browser(t *testing.T) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &browser{t: t, c: &http.Client{Jar: jar, Transport: tr, Timeout: 10 * time.Second}}
}

func (b *browser) do(method, u, body string, header ...string) (int, string, *url.URL) {
	b.t.Helper()
	req, err := http.NewRequestWithContext(b.t.Context(), method, u, strings.NewReader(body))
	if err != nil {
		b.t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(raw), res.Request.URL
}

// signIn goes through the provider's login page as a user would, and
// reads the session's CSRF token.
func (sh *sessionHarness) signIn(b *browser, user string) (int, string) {
	b.t.Helper()
	status, body, at := b.do("GET", sh.url+signin.PathLogin, "")
	id := at.Query().Get("authRequestID")
	if status != http.StatusOK || id == "" || !strings.Contains(body, `name="password"`) {
		b.t.Fatalf("login page: %d at %s", status, at)
	}
	req, err := http.NewRequestWithContext(b.t.Context(), "POST", sh.op.Issuer+"login/username",
		strings.NewReader(url.Values{"id": {id}, "username": {user}, "password": {signintest.Password}}.Encode()))
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := b.c.Do(req)
	if err != nil {
		b.t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if _, s, _ := b.do("GET", sh.url+signin.PathSession, ""); strings.Contains(s, "csrf_token") {
		var v struct {
			CSRF string `json:"csrf_token"`
		}
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			b.t.Fatal(err)
		}
		b.csrf = v.CSRF
	}
	return res.StatusCode, string(raw)
}

func TestSessionSignIn(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testSessionSignIn(t, newSessionHarness(t)) })
	t.Run("postgres", func(t *testing.T) {
		testSessionSignIn(t, startSessionHarness(t, signintest.Start(t, providerUsers...), pgsession.New(dbtest.Pool(t)), ""))
	})
}

func testSessionSignIn(t *testing.T, sh *sessionHarness) {
	b := sh.browser(t)
	if status, body, _ := b.do("GET", sh.url+signin.PathSession, ""); status != http.StatusUnauthorized || !strings.Contains(body, `"signed_in":false`) {
		t.Fatalf("session before sign-in: %d %s", status, body)
	}
	sh.signIn(b, "mona")
	if b.csrf == "" {
		t.Fatal("no CSRF token after sign-in")
	}
	status, body, _ := b.do("GET", sh.url+"/v1/me", "")
	if status != http.StatusOK || !strings.Contains(body, `"name":"Mona Moderator [oidc:u-mona]"`) || !strings.Contains(body, `"via":"session"`) {
		t.Fatalf("me: %d %s", status, body)
	}

	// Every state-changing request carries the CSRF token.
	sh.submit("r1", "caption_suggestion", "hello")
	sh.escalate("r1", domain.ReasonBudgetExhausted)
	status, body, _ = b.do("POST", sh.url+"/v1/manual-queue/r1/claim", "")
	if status != http.StatusForbidden || !strings.Contains(body, "problem:csrf") {
		t.Fatalf("claim without the CSRF token: %d %s", status, body)
	}
	if status, body, _ = b.do("POST", sh.url+"/v1/manual-queue/r1/claim", "", signin.HeaderCSRF, "x"+b.csrf); status != http.StatusForbidden {
		t.Fatalf("claim with a wrong CSRF token: %d %s", status, body)
	}
	if status, body, _ = b.do("POST", sh.url+"/v1/manual-queue/r1/claim", "", signin.HeaderCSRF, b.csrf); status != http.StatusOK {
		t.Fatalf("claim: %d %s", status, body)
	}
	hist, err := sh.ledger.History(t.Context(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	if last := hist.Events[len(hist.Events)-1]; last.Metadata.Actor != "Mona Moderator [oidc:u-mona]" {
		t.Fatalf("ledger actor %q", last.Metadata.Actor)
	}
	// A bearer token in the header is that token, whatever the cookie.
	if status, body, _ = b.do("GET", sh.url+"/v1/me", "", "Authorization", "Bearer "+auditorToken); status != http.StatusOK || !strings.Contains(body, `"name":"audrey"`) {
		t.Fatalf("me with a bearer token: %d %s", status, body)
	}

	// Removed from the moderators' group, the user keeps the role until
	// the session is next refreshed at the provider, then loses it.
	sh.op.SetGroups("u-mona", "staff")
	if status, _, _ = b.do("GET", sh.url+"/v1/reviews/r1", ""); status != http.StatusOK {
		t.Fatalf("queue before the refresh: %d", status)
	}
	sh.skew.Store(int64(6 * time.Minute))
	status, body, _ = b.do("GET", sh.url+"/v1/reviews/r1", "")
	if status != http.StatusForbidden || !strings.Contains(body, "problem:no-role") {
		t.Fatalf("queue after the refresh: %d %s", status, body)
	}
	sh.op.SetGroups("u-mona", "mods")
	sh.skew.Store(int64(12 * time.Minute))
	if status, _, _ = b.do("GET", sh.url+"/v1/reviews/r1", ""); status != http.StatusOK {
		t.Fatalf("queue after being added back: %d", status)
	}

	// Sign-out: CSRF checked, the session ends here, the browser is sent
	// to the provider's end_session_endpoint.
	if status, _, _ = b.do("POST", sh.url+signin.PathLogout, ""); status != http.StatusForbidden {
		t.Fatalf("logout without CSRF: %d", status)
	}
	status, body, _ = b.do("POST", sh.url+signin.PathLogout, "", signin.HeaderCSRF, b.csrf)
	if status != http.StatusOK || !strings.Contains(body, `"redirect":"`+sh.op.Issuer) || !strings.Contains(body, "id_token_hint") || !strings.Contains(body, "post_logout_redirect_uri") {
		t.Fatalf("logout: %d %s", status, body)
	}
	if status, _, _ = b.do("GET", sh.url+"/v1/me", ""); status != http.StatusUnauthorized {
		t.Fatalf("me after sign-out: %d", status)
	}
}

// TestSessionRefreshOutlivesItsRequest: a refresh due when a request comes
// is carried to its end even when the request goes away meanwhile (a
// browser navigating away cancels its fetches). Cut short, the provider
// may have rotated the refresh token without the session storing the new
// one, and the session's next refresh be refused: a browser test saw the
// session end that way. The session stays, refreshed.
func TestSessionRefreshOutlivesItsRequest(t *testing.T) {
	sh := newSessionHarness(t)
	b := sh.browser(t)
	sh.signIn(b, "mona")
	base, err := url.Parse(sh.url)
	if err != nil {
		t.Fatal(err)
	}
	sh.skew.Store(int64(6 * time.Minute)) // the refresh is due
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the request is gone before its refresh starts
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, sh.url+"/v1/me", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range b.c.Jar.Cookies(base) {
		req.AddCookie(c)
	}
	if sess, err := sh.sessions.Lookup(req); err != nil || sess.Identity.Subject != "u-mona" {
		t.Fatalf("Lookup of a gone request with its refresh due: %+v, %v; want the refreshed session", sess, err)
	}
	// Refreshed: not due again until the next interval, and the refresh
	// token it stored is the provider's current one.
	sh.skew.Store(int64(12 * time.Minute))
	if status, body, _ := b.do("GET", sh.url+"/v1/me", ""); status != http.StatusOK || !strings.Contains(body, "u-mona") {
		t.Fatalf("me after the gone request's refresh and another: %d %s", status, body)
	}
}

// TestSessionAcrossProcesses: two API processes on one database share the
// sessions: a sign-in started on one finishes on the other, either
// serves the session, and a sign-out on one ends it on both.
func TestSessionAcrossProcesses(t *testing.T) {
	op := signintest.Start(t, providerUsers...)
	url := dbtest.URL(t)
	a := startSessionHarness(t, op, pgsession.New(dbtest.PoolOn(t, url, nil)), "")
	b := startSessionHarness(t, op, pgsession.New(dbtest.PoolOn(t, url, nil)), a.url) // the provider sends b's sign-ins back to a
	br := b.browser(t)
	b.signIn(br, "mona") // login on b, callback on a
	if br.csrf == "" {
		t.Fatal("no session after a sign-in finished on the other process")
	}
	for _, sh := range []*sessionHarness{a, b} {
		if status, body, _ := br.do("GET", sh.url+"/v1/me", ""); status != http.StatusOK || !strings.Contains(body, `"via":"session"`) {
			t.Fatalf("me on %s: %d %s", sh.url, status, body)
		}
	}
	if status, _, _ := br.do("POST", b.url+signin.PathLogout, "", signin.HeaderCSRF, br.csrf); status != http.StatusOK {
		t.Fatalf("logout on b: %d", status)
	}
	if status, _, _ := br.do("GET", a.url+"/v1/me", ""); status != http.StatusUnauthorized {
		t.Fatalf("me on a after the sign-out on b: %d", status)
	}
}

func TestSessionRefused(t *testing.T) {
	sh := newSessionHarness(t)
	// A user whose groups map to no role is told so on a page.
	b := sh.browser(t)
	status, body := sh.signIn(b, "nobody")
	if status != http.StatusForbidden || !strings.Contains(body, "You signed in as No Body, but your account has no role") {
		t.Fatalf("no-role sign-in: %d %s", status, body)
	}
	if status, _, _ := b.do("GET", sh.url+"/v1/me", ""); status != http.StatusUnauthorized {
		t.Fatalf("me without a session: %d", status)
	}
	// A callback that this browser did not start is refused.
	other := sh.browser(t)
	status, body, _ = other.do("GET", sh.url+signin.PathCallback+"?code=x&state=y", "")
	if status != http.StatusBadRequest || !strings.Contains(body, "not started in this browser") {
		t.Fatalf("foreign callback: %d %s", status, body)
	}
	// A forged session cookie is no session.
	u, _ := url.Parse(sh.url)
	other.c.Jar.SetCookies(u, []*http.Cookie{{Name: "reviewledger_session", Value: "forged.forged"}})
	if status, _, _ := other.do("GET", sh.url+"/v1/me", ""); status != http.StatusUnauthorized {
		t.Fatalf("forged cookie: %d", status)
	}
}
