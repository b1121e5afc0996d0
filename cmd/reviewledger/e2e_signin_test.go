package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/signin/signintest"
	"github.com/reviewledger/reviewledger/api/ui/uitest"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// signinUsers are the accounts of the test's OpenID Provider.
var signinUsers = []signintest.User{
	{ID: "u-olga", Username: "olga", First: "Olga", Last: "Okafor", Groups: []string{"mods"}},
	{ID: "u-ivan", Username: "ivan", First: "Ivan", Last: "Idle", Groups: []string{"staff"}},
	{ID: "u-ada", Username: "ada", First: "Ada", Last: "Auditor", Groups: []string{"audit"}},
}

// signinEnv configures a server for the provider p.
func signinEnv(p *signintest.Provider) map[string]string {
	return map[string]string{
		"REVIEWLEDGER_OIDC_ISSUER":        p.Issuer,
		"REVIEWLEDGER_OIDC_CLIENT_ID":     signintest.ClientID,
		"REVIEWLEDGER_OIDC_CLIENT_SECRET": signintest.ClientSecret,
		"REVIEWLEDGER_OIDC_ROLE_MAP":      "moderator=mods,auditor=audit",
	}
}

// TestE2EJWTAndTokenFile: the API accepts the access tokens of a real
// OpenID Provider beside the static tokens, and reloads a token file on
// SIGHUP, refusing a removed token from then on.
func TestE2EJWTAndTokenFile(t *testing.T) {
	t.Parallel()
	op := signintest.Start(t, signinUsers...)
	file := filepath.Join(t.TempDir(), "tokens")
	const fileTok = "moderator-token-from-the-file-01"
	const newTok = "auditor-token-added-to-the-file"
	if err := os.WriteFile(file, []byte("# the team's tokens\nmoderator:filed:"+fileTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Services only: an audience and no client, so no UI sign-in.
	env := signinEnv(op)
	delete(env, "REVIEWLEDGER_OIDC_CLIENT_ID")
	delete(env, "REVIEWLEDGER_OIDC_CLIENT_SECRET")
	env["REVIEWLEDGER_OIDC_AUDIENCE"] = signintest.ClientID
	env["REVIEWLEDGER_TOKENS_FILE"] = file
	srv := newE2EServer(t, env)
	srv.expect(t, http.StatusNotFound, "GET", "/auth/session", "", nil)

	olga, err := op.SignIn(t.Context(), "olga")
	if err != nil {
		t.Fatal(err)
	}
	me := decode[map[string]any](t, srv.expect(t, http.StatusOK, "GET", "/v1/me", olga.AccessToken, nil))
	if me["name"] != "Olga Okafor [oidc:u-olga]" || me["role"] != "moderator" || me["via"] != "jwt" {
		t.Fatalf("me %v", me)
	}
	srv.expect(t, http.StatusOK, "GET", "/v1/manual-queue", olga.AccessToken, nil)
	ivan, err := op.SignIn(t.Context(), "ivan")
	if err != nil {
		t.Fatal(err)
	}
	if pr := srv.expectProblem(t, http.StatusForbidden, "GET", "/v1/me", ivan.AccessToken, nil); !strings.HasSuffix(pr.Type, ":no-role") {
		t.Fatalf("problem %+v", pr)
	}
	bad := op.Valid("u-olga", "mods")
	bad.Audience = []string{"another-service"}
	srv.expectProblem(t, http.StatusUnauthorized, "GET", "/v1/me", op.Mint(t, bad), nil)
	srv.expectProblem(t, http.StatusUnauthorized, "GET", "/v1/me", op.MintNone(t, op.Valid("u-olga", "mods")), nil)

	// Static tokens, from the environment and the file.
	srv.expect(t, http.StatusOK, "GET", "/v1/me", tokModerator, nil)
	srv.expect(t, http.StatusOK, "GET", "/v1/me", fileTok, nil)

	// The file loses one token and gains another; SIGHUP.
	if err := os.WriteFile(file, []byte("auditor:added:"+newTok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	clocktest.EventuallyShows(t, "the removed token refused", func() (bool, string) {
		res := srv.call(t, "GET", "/v1/me", fileTok, nil)
		return res.Status == http.StatusUnauthorized, res.String()
	})
	srv.expect(t, http.StatusOK, "GET", "/v1/me", newTok, nil)
	srv.expect(t, http.StatusOK, "GET", "/v1/me", tokModerator, nil)

	// A file that does not parse leaves the tokens in force.
	if err := os.WriteFile(file, []byte("auditor:short:x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	clocktest.EventuallyShows(t, "the refused reload logged", func() (bool, string) {
		return strings.Contains(srv.logs.String(), "tokens not reloaded"), ""
	})
	srv.expect(t, http.StatusOK, "GET", "/v1/me", newTok, nil)
}

// TestE2EBrowserSignIn: a moderator signs in to the UI served by the real
// server through a real OpenID Provider's login page in headless
// Chromium, works the queue (the ledger records the provider's subject,
// the content read is recorded with the session), stays signed in across
// a restart of the server, loses access when
// removed from the moderators' group at the next refresh, and signs out
// at the provider.
func TestE2EBrowserSignIn(t *testing.T) {
	uitest.Chromium(t)
	t.Parallel()
	op := signintest.Start(t, signinUsers...)
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	env := signinEnv(op)
	env["REVIEWLEDGER_ADDR"] = addr
	env["REVIEWLEDGER_OIDC_REDIRECT_URL"] = "http://" + addr + "/auth/callback"
	env["REVIEWLEDGER_OIDC_REFRESH_INTERVAL"] = "1s"
	srv := newE2EServer(t, env)

	const id = "e2e-oidc-0001"
	srv.Provider.script(id, status(http.StatusBadRequest, ""))
	srv.submit(t, id, "e2e_fast", content("for the signed-in moderator"))
	if got := srv.waitSettled(t, id); got.State != "manual_review" {
		t.Fatalf("review %+v, want manual_review", got)
	}
	srv.waitQueued(t, id, "e2e_fast")

	page := uitest.Start(t, srv.URL)
	page.Open("/")
	page.WaitFor("the provider's sign-in offered", `() => !document.getElementById('oidc-signin').hidden`)
	page.Screenshot("e2e-signin-provider")
	page.Click("#oidc-signin-link")
	page.WaitNavigated("the provider's login page", `!!document.getElementById('username') && !!document.getElementById('password')`)
	page.Type("#username", "olga")
	page.Type("#password", signintest.Password+kb.Enter)
	page.WaitNavigated("the UI back from the provider", `location.origin === `+strconv.Quote(srv.URL)+` && !!document.getElementById('who')`)
	page.WaitText("#who", "Signed in as Olga Okafor (moderator)")
	page.WaitText(uitest.Row(id), "e2e_fast")

	page.Click(uitest.Row(id) + " button.claim")
	page.WaitText("#queue-notice", "You claimed "+id+" until")
	page.Click(uitest.Row(id) + " a")
	page.WaitText("#review-state", "manual review")
	page.WaitText("#content", "for the signed-in moderator")
	const note = "Checked after signing in with the provider."
	page.Type("#decision-note", note)
	page.Click("#decide-accept")
	page.WaitText("#decision-result", "Decision recorded: accepted")

	const ledgerName = "Olga Okafor [oidc:u-olga]"
	evs := srv.events(t, id)
	last := evs[len(evs)-1]
	if last.Type != "ManualDecisionRecorded" || last.field("moderator") != ledgerName {
		t.Fatalf("last event %s %s", last.Type, last.Data)
	}
	access := decode[struct {
		Accesses []map[string]any `json:"accesses"`
	}](t, srv.expect(t, http.StatusOK, "GET", "/v1/reviews/"+id+"/content-access", tokAuditor, nil))
	if len(access.Accesses) == 0 {
		t.Fatal("the browser's content read is not recorded")
	}
	a := access.Accesses[0]
	if a["subject"] != "u-olga" || a["display_name"] != "Olga Okafor" || a["via"] != "session" || a["credential"] == "" || a["outcome"] != "served" {
		t.Fatalf("content access %v", a)
	}

	// outcome loads the page and waits until it has either signed in or
	// shown why not.
	outcome := func() string {
		page.Open("/")
		page.WaitFor("the sign-in to end", `() => !document.getElementById('session').hidden || !document.getElementById('signin-error').hidden`)
		if uitest.Evaluate[bool](page, `!document.getElementById('session').hidden`) {
			return "in: " + page.Text("#who")
		}
		return "refused: " + page.Text("#signin-error")
	}

	// Sessions are in the database: the server restarted, the user is
	// still signed in.
	srv.stop(t)
	startServe(t, srv.env)
	if o := outcome(); o != "in: Signed in as Olga Okafor (moderator)" {
		t.Fatalf("after a restart the page shows %q", o)
	}

	// Removed from the moderators' group at the provider: at the next
	// refresh of the session the UI is refused, and says why.
	op.SetGroups("u-olga", "staff")
	clocktest.EventuallyShows(t, "the UI to refuse the user without a role", func() (bool, string) {
		o := outcome()
		return strings.HasPrefix(o, "refused: ") && strings.Contains(o, "no role"), o
	})
	op.SetGroups("u-olga", "mods")
	clocktest.EventuallyShows(t, "the UI to let the user back in", func() (bool, string) {
		o := outcome()
		return o == "in: Signed in as Olga Okafor (moderator)", o
	})

	// Signing out ends the session and goes through the provider's
	// end_session_endpoint back to the sign-in page.
	page.Click("#signout")
	clocktest.EventuallyShows(t, "the browser at the provider's end_session_endpoint", func() (bool, string) {
		return op.Visited("/end_session"), ""
	})
	page.WaitNavigated("the sign-in page back from the provider", `location.origin === `+strconv.Quote(srv.URL)+` && document.readyState === 'complete' && !!document.getElementById('oidc-signin') && !document.getElementById('oidc-signin').hidden`)
	// The session is gone: a fresh load offers the sign-in again.
	page.Open("/")
	page.WaitFor("the provider's sign-in offered", `() => !document.getElementById('oidc-signin').hidden && document.getElementById('session').hidden`)
	if problems := page.ConsoleProblems(); len(problems) > 0 {
		t.Errorf("console: %v", problems)
	}
}
