package httpapi

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/signintest"
	"github.com/reviewledger/reviewledger/domain"
)

var providerUsers = []signintest.User{
	{ID: "u-mona", Username: "mona", First: "Mona", Last: "Moderator", Groups: []string{"mods"}},
	{ID: "u-audrey", Username: "audrey", First: "Audrey", Last: "Auditor", Groups: []string{"audit"}},
	{ID: "u-nobody", Username: "nobody", First: "No", Last: "Body", Groups: []string{"staff"}},
}

// oidcHarness is the test server accepting the tokens of a real OpenID
// Provider beside the static ones.
func oidcHarness(t *testing.T) (*harness, *signintest.Provider) {
	t.Helper()
	p := signintest.Start(t, providerUsers...)
	v, err := signin.NewVerifier(t.Context(), signin.Config{
		Issuer: p.Issuer, ClientID: signintest.ClientID, HTTPClient: p.Client, KeyRefetch: -1, // the rotation test fetches at once
		RoleMap: map[string][]string{"moderator": {"mods"}, "auditor": {"audit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return newHarness(t, func(_ *Config, d *Deps) { d.Tokens = v }), p
}

func signIn(t *testing.T, p *signintest.Provider, user string) (access, refresh string) {
	t.Helper()
	tok, err := p.SignIn(t.Context(), user)
	if err != nil {
		t.Fatal(err)
	}
	return tok.AccessToken, tok.RefreshToken
}

func TestJWTBearerTokens(t *testing.T) {
	h, p := oidcHarness(t)
	mona, refresh := signIn(t, p, "mona")

	rec := h.do("GET", "/v1/me", mona, "")
	if rec.Code != http.StatusOK {
		t.Fatalf("me: %d %s", rec.Code, rec.Body)
	}
	me := decode[meView](t, rec)
	if me.Name != "Mona Moderator [oidc:u-mona]" || me.Role != RoleModerator || me.Subject != "u-mona" || me.DisplayName != "Mona Moderator" || me.Via != ViaJWT || !slices.Equal(me.Roles, []Role{RoleModerator}) {
		t.Fatalf("me %+v", me)
	}
	// The role table holds for provider users as for static tokens.
	audrey, _ := signIn(t, p, "audrey")
	wantProblem(t, h.do("GET", "/v1/manual-queue", audrey, ""), http.StatusForbidden, "forbidden", "")
	// A user whose claims map to no role is told so.
	nobody, _ := signIn(t, p, "nobody")
	pr := wantProblem(t, h.do("GET", "/v1/me", nobody, ""), http.StatusForbidden, "no-role", "")
	if !contains(pr.Detail, "No Body") {
		t.Fatalf("no-role problem does not name the user: %+v", pr)
	}
	// Static tokens keep working beside them.
	if rec := h.do("GET", "/v1/me", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("static token: %d %s", rec.Code, rec.Body)
	}

	// The ledger records the provider's subject and the display name.
	h.submit("r1", "caption_suggestion", "hello")
	h.escalate("r1", domain.ReasonBudgetExhausted)
	if rec := h.do("POST", "/v1/manual-queue/r1/claim", mona, ""); rec.Code != http.StatusOK {
		t.Fatalf("claim: %d %s", rec.Code, rec.Body)
	}
	hist, err := h.ledger.History(context.Background(), "r1")
	if err != nil {
		t.Fatal(err)
	}
	last := hist.Events[len(hist.Events)-1]
	if c, ok := last.Event.(domain.Claimed); !ok || c.Moderator != "Mona Moderator [oidc:u-mona]" || last.Metadata.Actor != c.Moderator {
		t.Fatalf("last event %+v", last)
	}

	// Removed from the moderators' group at the provider, the user loses
	// the role with the next token the provider issues.
	p.SetGroups("u-mona", "staff")
	refreshed, err := p.Refresh(t.Context(), refresh)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, h.do("GET", "/v1/manual-queue", refreshed.AccessToken, ""), http.StatusForbidden, "no-role", "")
}

func TestJWTBearerTokensRefused(t *testing.T) {
	h, p := oidcHarness(t)
	now := time.Now()
	valid := func(mod func(*signintest.Claims)) string {
		c := p.Valid("u-mona", "mods")
		mod(&c)
		return p.Mint(t, c)
	}
	for name, token := range map[string]string{
		"expired":        valid(func(c *signintest.Claims) { c.IssuedAt, c.Expiry = now.Add(-time.Hour), now.Add(-time.Minute) }),
		"not yet valid":  valid(func(c *signintest.Claims) { c.NotBefore = now.Add(5 * time.Minute) }),
		"wrong audience": valid(func(c *signintest.Claims) { c.Audience = []string{"someone-else"} }),
		"wrong issuer":   valid(func(c *signintest.Claims) { c.Issuer = "http://127.0.0.1:9/" }),
		"alg none":       p.MintNone(t, p.Valid("u-mona", "mods")),
		"HS256":          p.MintHMAC(t, p.Valid("u-mona", "mods")),
		"re-signed":      p.MintForeign(t, p.Valid("u-mona", "mods")),
		"garbage":        "a.b.c",
	} {
		t.Run(name, func(t *testing.T) {
			wantProblem(t, h.do("GET", "/v1/me", token, ""), http.StatusUnauthorized, "unauthenticated", "")
		})
	}
	// A token minted like the refused ones but valid is accepted: the
	// refusals are the checks, not the minting.
	if rec := h.do("GET", "/v1/me", valid(func(*signintest.Claims) {}), ""); rec.Code != http.StatusOK {
		t.Fatalf("valid minted token: %d %s", rec.Code, rec.Body)
	}
	// A rotation at the provider is picked up.
	p.Rotate(true)
	if rec := h.do("GET", "/v1/me", valid(func(*signintest.Claims) {}), ""); rec.Code != http.StatusOK {
		t.Fatalf("token signed with the rotated key: %d %s", rec.Code, rec.Body)
	}
}

func TestSetTokensRevokesAtOnce(t *testing.T) {
	h := newHarness(t)
	if rec := h.do("GET", "/v1/me", moderatorToken, ""); rec.Code != http.StatusOK {
		t.Fatalf("me: %d", rec.Code)
	}
	kept := slices.DeleteFunc(slices.Clone(testTokens), func(t Token) bool { return t.Secret == moderatorToken })
	if err := h.srv.SetTokens(kept); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, h.do("GET", "/v1/me", moderatorToken, ""), http.StatusUnauthorized, "unauthenticated", "")
	if rec := h.do("GET", "/v1/me", moderator2, ""); rec.Code != http.StatusOK {
		t.Fatalf("a kept token: %d", rec.Code)
	}
	if err := h.srv.SetTokens([]Token{{Role: RoleAdmin, Name: "x", Secret: "short"}}); err == nil {
		t.Fatal("SetTokens took a short token")
	}
	if rec := h.do("GET", "/v1/me", moderator2, ""); rec.Code != http.StatusOK {
		t.Fatalf("after a refused reload the tokens are kept: %d", rec.Code)
	}
}
