package signin_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/api/signin"
	"github.com/reviewledger/reviewledger/api/signin/signintest"
)

var users = []signintest.User{
	{ID: "u-mona", Username: "mona", First: "Mona", Last: "Moderator", Groups: []string{"mods"}},
	{ID: "u-audrey", Username: "audrey", First: "Audrey", Last: "Auditor", Groups: []string{"audit", "staff"}},
}

// clock is a test's clock: the wall clock moved by skew.
type clock struct{ skew atomic.Int64 }

func (c *clock) now() time.Time      { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *clock) add(d time.Duration) { c.skew.Add(int64(d)) }

func newVerifier(t *testing.T, p *signintest.Provider) *signin.Verifier {
	t.Helper()
	return newVerifierAt(t, p, time.Now)
}

func newVerifierAt(t *testing.T, p *signintest.Provider, now func() time.Time) *signin.Verifier {
	t.Helper()
	v, err := signin.NewVerifier(t.Context(), signin.Config{
		Issuer: p.Issuer, ClientID: signintest.ClientID, ClientSecret: signintest.ClientSecret, HTTPClient: p.Client, Now: now,
		RoleMap: map[string][]string{"moderator": {"mods"}, "auditor": {"audit"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestAccessTokensOfARealProvider(t *testing.T) {
	p := signintest.Start(t, users...)
	var c clock
	v := newVerifierAt(t, p, c.now)
	ctx := t.Context()
	tok, err := p.SignIn(ctx, "mona")
	if err != nil {
		t.Fatal(err)
	}
	id, err := v.VerifyAccessToken(ctx, tok.AccessToken)
	if err != nil {
		t.Fatalf("the provider's access token: %v", err)
	}
	if id.Subject != "u-mona" || id.Name != "Mona Moderator" || !slices.Equal(id.Roles, []string{"moderator"}) {
		t.Fatalf("identity %+v", id)
	}

	// The provider rotates its key and stops publishing the old one: the
	// next token, signed with the new key, is verified once the key set
	// is read again, which a token no cached key verifies causes at most
	// every DefaultKeyRefetch.
	p.Rotate(true)
	c.add(signin.DefaultKeyRefetch)
	tok2, err := p.SignIn(ctx, "mona")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.VerifyAccessToken(ctx, tok2.AccessToken); err != nil {
		t.Fatalf("a token signed with the rotated key: %v", err)
	}

	// Removed from the group, the user keeps the token issued before and
	// loses the role at the next refresh.
	p.SetGroups("u-mona", "staff")
	refreshed, err := p.Refresh(ctx, tok2.RefreshToken)
	if err != nil {
		t.Fatal(err)
	}
	id, err = v.VerifyAccessToken(ctx, refreshed.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if len(id.Roles) != 0 {
		t.Fatalf("roles after removal from the group: %v", id.Roles)
	}
}

func TestRefusedAccessTokens(t *testing.T) {
	p := signintest.Start(t, users...)
	v := newVerifier(t, p)
	ctx := t.Context()
	now := time.Now()
	for name, mint := range map[string]func() string{
		"expired": func() string {
			c := p.Valid("u-mona", "mods")
			c.IssuedAt, c.Expiry = now.Add(-10*time.Minute), now.Add(-time.Minute)
			return p.Mint(t, c)
		},
		"not yet valid": func() string {
			c := p.Valid("u-mona", "mods")
			c.NotBefore = now.Add(2 * time.Minute)
			return p.Mint(t, c)
		},
		"wrong audience": func() string {
			c := p.Valid("u-mona", "mods")
			c.Audience = []string{"another-service"}
			return p.Mint(t, c)
		},
		"wrong issuer": func() string {
			c := p.Valid("u-mona", "mods")
			c.Issuer = "http://127.0.0.1:1/"
			return p.Mint(t, c)
		},
		"alg none":                     func() string { return p.MintNone(t, p.Valid("u-mona", "mods")) },
		"HS256 with the client secret": func() string { return p.MintHMAC(t, p.Valid("u-mona", "mods")) },
		"re-signed":                    func() string { return p.MintForeign(t, p.Valid("u-mona", "mods")) },
		"no subject": func() string {
			return p.Mint(t, p.Valid("", "mods"))
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := v.VerifyAccessToken(ctx, mint())
			if !errors.Is(err, signin.ErrInvalidToken) {
				t.Fatalf("got %v, want ErrInvalidToken", err)
			}
		})
	}

	// Within the leeway a token is still good.
	c := p.Valid("u-audrey", "audit")
	c.Expiry, c.NotBefore = now.Add(-10*time.Second), now.Add(10*time.Second)
	id, err := v.VerifyAccessToken(ctx, p.Mint(t, c))
	if err != nil || !slices.Equal(id.Roles, []string{"auditor"}) {
		t.Fatalf("a token within the leeway: %+v, %v", id, err)
	}
}

// TestKeySetRefetchBounded: tokens that no known key verifies (made-up
// key IDs, forged signatures) make the key set be fetched again at most
// every DefaultKeyRefetch, however many come.
func TestKeySetRefetchBounded(t *testing.T) {
	p := signintest.Start(t, users...)
	var c clock
	v := newVerifierAt(t, p, c.now)
	ctx := t.Context()
	if _, err := v.VerifyAccessToken(ctx, p.Mint(t, p.Valid("u-mona", "mods"))); err != nil {
		t.Fatal(err)
	}
	if n := v.KeyFetches(); n != 1 {
		t.Fatalf("%d fetches after the first token", n)
	}
	for range 50 {
		if _, err := v.VerifyAccessToken(ctx, p.MintForeign(t, p.Valid("u-mona", "mods"))); !errors.Is(err, signin.ErrInvalidToken) {
			t.Fatalf("forged token: %v", err)
		}
	}
	if n := v.KeyFetches(); n != 1 {
		t.Fatalf("%d fetches after 50 forged tokens, want 1", n)
	}
	c.add(signin.DefaultKeyRefetch)
	for range 50 {
		_, _ = v.VerifyAccessToken(ctx, p.MintForeign(t, p.Valid("u-mona", "mods")))
	}
	if n := v.KeyFetches(); n != 2 {
		t.Fatalf("%d fetches after another 50 forged tokens past the interval, want 2", n)
	}
	// A genuine token keeps being verified from the cache.
	if _, err := v.VerifyAccessToken(ctx, p.Mint(t, p.Valid("u-mona", "mods"))); err != nil || v.KeyFetches() != 2 {
		t.Fatalf("genuine token: %v, %d fetches", err, v.KeyFetches())
	}
}

func TestParseRoleMap(t *testing.T) {
	roles := []string{"submitter", "moderator", "auditor", "admin"}
	m, err := signin.ParseRoleMap("moderator=mods|reviewers, auditor=audit,moderator=leads", roles)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m["moderator"], []string{"mods", "reviewers", "leads"}) || !slices.Equal(m["auditor"], []string{"audit"}) {
		t.Fatalf("got %v", m)
	}
	for _, bad := range []string{"owner=x", "moderator", "moderator=", "moderator=a|"} {
		if _, err := signin.ParseRoleMap(bad, roles); err == nil || !strings.Contains(err.Error(), "REVIEWLEDGER_OIDC_ROLE_MAP") {
			t.Errorf("%q: got %v", bad, err)
		}
	}
}

func TestConfigNamesTheSetting(t *testing.T) {
	for want, cfg := range map[string]signin.Config{
		"REVIEWLEDGER_OIDC_ISSUER":   {ClientID: "x", RoleMap: map[string][]string{"admin": {"a"}}},
		"REVIEWLEDGER_OIDC_AUDIENCE": {Issuer: "https://idp.example", RoleMap: map[string][]string{"admin": {"a"}}},
		"REVIEWLEDGER_OIDC_ROLE_MAP": {Issuer: "https://idp.example", ClientID: "x"},
	} {
		if _, err := signin.NewVerifier(context.Background(), cfg); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
}
