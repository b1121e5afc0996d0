package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/reviewledger/reviewledger/api/signin/signintest"
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
	env := signinEnv(op)
	env["REVIEWLEDGER_TOKENS_FILE"] = file
	srv := newE2EServer(t, env)

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
	eventually(t, "the removed token refused", func() (bool, string) {
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
	eventually(t, "the refused reload logged", func() (bool, string) {
		return strings.Contains(srv.logs.String(), "tokens not reloaded"), ""
	})
	srv.expect(t, http.StatusOK, "GET", "/v1/me", newTok, nil)
}
