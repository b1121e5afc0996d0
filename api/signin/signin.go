// Package signin verifies who a request comes from through an OpenID
// Provider: JWT access tokens presented as bearer tokens by services, and
// the browser sign-in of the UI (authorization code flow with PKCE, a
// server-side session behind an HttpOnly cookie). Discovery, the key set
// and its rotation, and every signature are go-oidc's and go-jose's; this
// package only decides what it accepts: the issuer, the audience, the
// algorithms, the times, and the roles the claims map to.
package signin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
)

// Algorithms are the only signature algorithms accepted; a token signed
// otherwise ("none" included) is refused.
var Algorithms = []string{oidc.RS256, oidc.ES256}

// DefaultLeeway is how far past its expiry, or before its not-before time,
// a token is still accepted, for clocks that disagree a little.
const DefaultLeeway = 30 * time.Second

var (
	// ErrInvalidToken: the token is not one the provider signed for this
	// audience, or it has expired. The message says which check failed.
	ErrInvalidToken = errors.New("invalid token")
	// ErrNoRole: the token is valid but none of its claim values maps to a
	// role.
	ErrNoRole = errors.New("no role mapped")
)

// Identity is who a verified token or session names.
type Identity struct {
	// Subject is the provider's stable identifier of the user (sub).
	Subject string
	// Name is a display name: the name claim, else preferred_username,
	// else email, else the subject.
	Name string
	// Roles are the roles the claim values map to, sorted; empty when none
	// does.
	Roles []string
	// Expiry is the token's expiry.
	Expiry time.Time
}

// Config configures a Verifier.
type Config struct {
	// Issuer is the provider's issuer URL (REVIEWLEDGER_OIDC_ISSUER).
	Issuer string
	// Audience is the aud an access token must carry
	// (REVIEWLEDGER_OIDC_AUDIENCE); the client ID when empty.
	Audience string
	// ClientID and ClientSecret identify reviewledger to the provider for
	// the UI's sign-in (REVIEWLEDGER_OIDC_CLIENT_ID, _CLIENT_SECRET).
	ClientID     string
	ClientSecret string
	// RolesClaim is the claim holding the user's groups or roles; a dotted
	// path reaches into objects ("realm_access.roles"). Default "groups".
	RolesClaim string
	// RoleMap maps a role to the claim values granting it.
	RoleMap map[string][]string
	// Leeway: DefaultLeeway when zero.
	Leeway time.Duration
	// KeyRefetch is the least time between two fetches of the key set
	// caused by tokens no cached key verifies (DefaultKeyRefetch when
	// zero; negative: no limit, for tests).
	KeyRefetch time.Duration
	// HTTPClient reaches the provider; a client with a 10 s timeout when
	// nil.
	HTTPClient *http.Client
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *Config) setDefaults() {
	if c.RolesClaim == "" {
		c.RolesClaim = "groups"
	}
	if c.Audience == "" {
		c.Audience = c.ClientID
	}
	if c.Leeway == 0 {
		c.Leeway = DefaultLeeway
	}
	if c.KeyRefetch == 0 {
		c.KeyRefetch = DefaultKeyRefetch
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate names the first setting at fault.
func (c *Config) Validate() error {
	switch {
	case c.Issuer == "":
		return errors.New("REVIEWLEDGER_OIDC_ISSUER: required")
	case !strings.HasPrefix(c.Issuer, "https://") && !strings.HasPrefix(c.Issuer, "http://"):
		return fmt.Errorf("REVIEWLEDGER_OIDC_ISSUER: %q is not an http(s) URL", c.Issuer)
	case c.Audience == "":
		return errors.New("REVIEWLEDGER_OIDC_AUDIENCE: required when REVIEWLEDGER_OIDC_CLIENT_ID is not set")
	case c.Leeway < 0 || c.Leeway > 5*time.Minute:
		return fmt.Errorf("REVIEWLEDGER_OIDC_LEEWAY: must be between 0 and 5m, got %s", c.Leeway)
	case len(c.RoleMap) == 0:
		return errors.New("REVIEWLEDGER_OIDC_ROLE_MAP: required: map at least one role, e.g. moderator=mods")
	}
	return nil
}

// ParseRoleMap parses REVIEWLEDGER_OIDC_ROLE_MAP: comma-separated
// role=value pairs; a value may list several claim values separated by
// '|', and a role may appear more than once. roles are the valid role
// names.
func ParseRoleMap(s string, roles []string) (map[string][]string, error) {
	const setting = "REVIEWLEDGER_OIDC_ROLE_MAP"
	m := map[string][]string{}
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		role, values, ok := strings.Cut(entry, "=")
		role = strings.TrimSpace(role)
		if !ok {
			return nil, fmt.Errorf("%s: entry %d: want role=claim-value, got %q", setting, i+1, entry)
		}
		if !slices.Contains(roles, role) {
			return nil, fmt.Errorf("%s: entry %d: role %q is not one of %s", setting, i+1, role, strings.Join(roles, ", "))
		}
		for _, v := range strings.Split(values, "|") {
			if v = strings.TrimSpace(v); v == "" {
				return nil, fmt.Errorf("%s: entry %d: empty claim value for role %s", setting, i+1, role)
			}
			m[role] = append(m[role], v)
		}
	}
	return m, nil
}

// Verifier checks JWT access tokens of the provider.
type Verifier struct {
	cfg      Config
	provider *oidc.Provider
	keys     *keySet
	access   *oidc.IDTokenVerifier
	id       *oidc.IDTokenVerifier // ID tokens, audience the client ID
	claims   providerClaims
}

type providerClaims struct {
	EndSession string `json:"end_session_endpoint"`
	JWKS       string `json:"jwks_uri"`
}

// NewVerifier reads the provider's discovery document. The key set is
// fetched when a token's signature no cached key verifies, at most every
// Config.KeyRefetch, so a rotation at the provider is picked up with the
// first token signed with the new key.
func NewVerifier(ctx context.Context, cfg Config) (*Verifier, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// The key set is fetched later, outside any request's context: the
	// client travels in a context that is never cancelled.
	pctx := oidc.ClientContext(context.WithoutCancel(ctx), cfg.HTTPClient)
	p, err := oidc.NewProvider(pctx, cfg.Issuer)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_OIDC_ISSUER: discovery: %w", err)
	}
	v := &Verifier{cfg: cfg, provider: p}
	if err := p.Claims(&v.claims); err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_OIDC_ISSUER: discovery document: %w", err)
	}
	// go-oidc accepts an expired token never and a not-yet-valid one five
	// minutes early: the clock handed to it runs Leeway behind, and the
	// not-before time is checked again here with Leeway.
	now := func() time.Time { return cfg.Now().Add(-cfg.Leeway) }
	if v.claims.JWKS == "" {
		return nil, errors.New("REVIEWLEDGER_OIDC_ISSUER: the discovery document has no jwks_uri")
	}
	v.keys = &keySet{url: v.claims.JWKS, client: cfg.HTTPClient, now: cfg.Now, refetch: cfg.KeyRefetch}
	v.access = oidc.NewVerifier(cfg.Issuer, v.keys, &oidc.Config{ClientID: cfg.Audience, SupportedSigningAlgs: Algorithms, Now: now})
	if cfg.ClientID != "" {
		v.id = oidc.NewVerifier(cfg.Issuer, v.keys, &oidc.Config{ClientID: cfg.ClientID, SupportedSigningAlgs: Algorithms, Now: now})
	}
	return v, nil
}

// LooksLikeJWT tells a compact JWS (three dot-separated parts) from an
// opaque token.
func LooksLikeJWT(token string) bool { return strings.Count(token, ".") == 2 }

// VerifyAccessToken checks a JWT access token: signed by the provider
// with a pinned algorithm, issued by the issuer for the audience, within
// its validity. Errors wrap ErrInvalidToken.
func (v *Verifier) VerifyAccessToken(ctx context.Context, raw string) (Identity, error) {
	return v.verify(ctx, v.access, raw)
}

// verifyIDToken checks an ID token issued to the client.
func (v *Verifier) verifyIDToken(ctx context.Context, raw string) (*oidc.IDToken, Identity, error) {
	tok, err := v.id.Verify(ctx, raw)
	if err != nil {
		return nil, Identity{}, fmt.Errorf("%s: %w", err.Error(), ErrInvalidToken)
	}
	id, err := v.identity(tok)
	return tok, id, err
}

// clientContext carries the HTTP client to the provider's endpoints.
func (v *Verifier) clientContext(ctx context.Context) context.Context {
	return oidc.ClientContext(ctx, v.cfg.HTTPClient)
}

func (v *Verifier) verify(ctx context.Context, verifier *oidc.IDTokenVerifier, raw string) (Identity, error) {
	tok, err := verifier.Verify(ctx, raw)
	if err != nil {
		return Identity{}, fmt.Errorf("%s: %w", err.Error(), ErrInvalidToken)
	}
	return v.identity(tok)
}

// identity reads the subject, display name and roles of a verified token.
func (v *Verifier) identity(tok *oidc.IDToken) (Identity, error) {
	var claims map[string]any
	if err := tok.Claims(&claims); err != nil {
		return Identity{}, fmt.Errorf("token claims: %s: %w", err.Error(), ErrInvalidToken)
	}
	if nbf, ok := claims["nbf"].(float64); ok {
		if at := time.Unix(int64(nbf), 0); v.cfg.Now().Add(v.cfg.Leeway).Before(at) {
			return Identity{}, fmt.Errorf("token not valid before %s: %w", at.UTC().Format(time.RFC3339), ErrInvalidToken)
		}
	}
	if tok.Subject == "" {
		return Identity{}, fmt.Errorf("token has no subject: %w", ErrInvalidToken)
	}
	return v.identityFrom(tok.Subject, claims, tok.Expiry), nil
}

func (v *Verifier) identityFrom(subject string, claims map[string]any, expiry time.Time) Identity {
	id := Identity{Subject: subject, Name: subject, Expiry: expiry}
	for _, k := range []string{"name", "preferred_username", "email"} {
		if s, ok := claims[k].(string); ok && strings.TrimSpace(s) != "" {
			id.Name = strings.TrimSpace(s)
			break
		}
	}
	id.Roles = v.roles(claimValues(claims, v.cfg.RolesClaim))
	return id
}

// roles maps claim values to roles, sorted.
func (v *Verifier) roles(values []string) []string {
	var roles []string
	for role, granting := range v.cfg.RoleMap {
		for _, g := range granting {
			if slices.Contains(values, g) {
				roles = append(roles, role)
				break
			}
		}
	}
	slices.Sort(roles)
	return roles
}

// claimValues reads a string or a list of strings at a dotted path.
func claimValues(claims map[string]any, path string) []string {
	var cur any = claims
	for _, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[part]
	}
	switch c := cur.(type) {
	case string:
		return strings.Fields(c)
	case []any:
		var out []string
		for _, e := range c {
			if s, ok := e.(string); ok {
				out = append(out, s)
			}
		}
		return out
	}
	return nil
}

// KeyFetches is how many times the key set was fetched.
func (v *Verifier) KeyFetches() int {
	v.keys.mu.Lock()
	defer v.keys.mu.Unlock()
	return v.keys.fetches
}

// EndSessionURL is the provider's end_session_endpoint, "" when its
// discovery document has none.
func (v *Verifier) EndSessionURL() string { return v.claims.EndSession }
