package httpapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/signin"
)

// Role is what a token may do. Admin may call every route.
type Role string

const (
	RoleSubmitter Role = "submitter"
	RoleModerator Role = "moderator"
	RoleAuditor   Role = "auditor"
	RoleAdmin     Role = "admin"
)

func (r Role) valid() bool {
	switch r {
	case RoleSubmitter, RoleModerator, RoleAuditor, RoleAdmin:
		return true
	}
	return false
}

// MinTokenLen is the shortest token accepted at start.
const MinTokenLen = 16

// Token is one bearer token. Its secret never appears in logs or errors.
type Token struct {
	Role   Role
	Name   string
	Secret string
}

// String hides the secret.
func (t Token) String() string { return fmt.Sprintf("%s:%s:***", t.Role, t.Name) }

var (
	// ErrInvalidConfig is wrapped by every configuration error; the message
	// names the setting.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrUnauthenticated: no bearer token, or not a known one.
	ErrUnauthenticated = errors.New("missing or invalid bearer token")
	// ErrForbidden: the token's role may not call the route.
	ErrForbidden = errors.New("role not allowed on this route")
	// ErrNoRole: the provider's token or session is valid, but no value
	// of its roles claim maps to a role.
	ErrNoRole = errors.New("no role mapped to this user")
)

// ParseTokens parses REVIEWLEDGER_TOKENS: comma-separated role:name:token.
// The token is everything after the second colon. Errors name the setting
// and the entry (by position and name, never by secret).
func ParseTokens(s string) ([]Token, error) {
	return parseTokens("REVIEWLEDGER_TOKENS", strings.Split(s, ","))
}

// ParseTokenFile parses the contents of REVIEWLEDGER_TOKENS_FILE: one
// role:name:token a line (or several, comma-separated); blank lines and
// lines starting with # are skipped. Errors name the setting and the
// entry, never the secret.
func ParseTokenFile(s string) ([]Token, error) {
	var entries []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		entries = append(entries, strings.Split(line, ",")...)
	}
	return parseTokens("REVIEWLEDGER_TOKENS_FILE", entries)
}

func parseTokens(setting string, entries []string) ([]Token, error) {
	var tokens []Token
	for i, entry := range entries {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.SplitN(entry, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("%s: entry %d: want role:name:token: %w", setting, i+1, ErrInvalidConfig)
		}
		tokens = append(tokens, Token{Role: Role(parts[0]), Name: parts[1], Secret: parts[2]})
	}
	if err := validateTokensOf(setting, tokens); err != nil {
		return nil, err
	}
	return tokens, nil
}

func validateTokens(tokens []Token) error { return validateTokensOf("REVIEWLEDGER_TOKENS", tokens) }

func validateTokensOf(setting string, tokens []Token) error {
	seen := make(map[string]bool)
	for i, t := range tokens {
		where := fmt.Sprintf("%s: entry %d (%q)", setting, i+1, t.Name)
		switch {
		case !t.Role.valid():
			return fmt.Errorf("%s: role %q is not one of submitter, moderator, auditor, admin: %w", where, t.Role, ErrInvalidConfig)
		case t.Name == "":
			return fmt.Errorf("%s: name must not be empty: %w", where, ErrInvalidConfig)
		case len(t.Secret) < MinTokenLen:
			return fmt.Errorf("%s: token is shorter than %d characters: %w", where, MinTokenLen, ErrInvalidConfig)
		case strings.ContainsAny(t.Secret, " \t\r\n"):
			return fmt.Errorf("%s: token contains white space: %w", where, ErrInvalidConfig)
		case seen[t.Secret]:
			return fmt.Errorf("%s: token is used twice: %w", where, ErrInvalidConfig)
		}
		seen[t.Secret] = true
	}
	return nil
}

// authenticator finds the token a request presents. Secrets are compared
// as SHA-256 digests with subtle.ConstantTimeCompare, against every token
// without stopping early, so neither the length nor the position of a
// match shows in the timing.
type authenticator struct {
	digests [][sha256.Size]byte
	tokens  []Token
}

func newAuthenticator(tokens []Token) *authenticator {
	a := &authenticator{tokens: slices.Clone(tokens)}
	for _, t := range tokens {
		a.digests = append(a.digests, sha256.Sum256([]byte(t.Secret)))
	}
	return a
}

func (a *authenticator) find(secret string) (Token, bool) {
	d := sha256.Sum256([]byte(secret))
	found := -1
	for i := range a.digests {
		if subtle.ConstantTimeCompare(d[:], a.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Token{}, false
	}
	return a.tokens[found], true
}

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(header string) (string, bool) {
	scheme, secret, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret = strings.TrimSpace(secret)
	return secret, secret != ""
}

const principalKey = "reviewledger.principal"

// How a principal authenticated, for the content-access audit and logs.
const (
	ViaToken   = "token"   // a static bearer token
	ViaJWT     = "jwt"     // a JWT access token of the OpenID Provider
	ViaSession = "session" // the UI's sign-in session
)

// Principal is who an authenticated request comes from.
type Principal struct {
	// Name is who the ledger records: a static token's name, or for a
	// user of the OpenID Provider the display name and the provider's
	// stable subject, "Jane Doe [oidc:248289761001]" (ledgerName).
	Name string
	// Role is the principal's highest role (admin, moderator, auditor,
	// submitter in that order); Roles are all of them.
	Role  Role
	Roles []Role
	// Subject and DisplayName are the provider's sub and display name;
	// for a static token both are the token's name.
	Subject, DisplayName string
	// Via is ViaToken, ViaJWT or ViaSession; Credential names the token
	// (its name, or a JWT's jti when it has one) or the session (an ID
	// that is not its cookie).
	Via, Credential string
}

// may tells whether the principal holds one of roles, or admin.
func (p Principal) may(roles []Role) bool {
	for _, r := range p.Roles {
		if r == RoleAdmin || slices.Contains(roles, r) {
			return true
		}
	}
	return false
}

func tokenPrincipal(t Token) Principal {
	return Principal{Name: t.Name, Role: t.Role, Roles: []Role{t.Role}, Subject: t.Name, DisplayName: t.Name, Via: ViaToken, Credential: t.Name}
}

// rolePrecedence orders roles for Principal.Role.
var rolePrecedence = []Role{RoleAdmin, RoleModerator, RoleAuditor, RoleSubmitter}

// identityPrincipal is the principal of a verified OpenID identity; its
// roles are the valid ones among those mapped.
func identityPrincipal(id signin.Identity, via, credential string) Principal {
	p := Principal{Name: ledgerName(id), Subject: id.Subject, DisplayName: id.Name, Via: via, Credential: credential}
	for _, r := range rolePrecedence {
		if slices.Contains(id.Roles, string(r)) {
			p.Roles = append(p.Roles, r)
		}
	}
	if len(p.Roles) > 0 {
		p.Role = p.Roles[0]
	}
	return p
}

// ledgerName is the actor name of a provider's user: the display name
// and the stable subject, which alone identifies the user (display
// names change and repeat).
func ledgerName(id signin.Identity) string {
	if id.Name == "" || id.Name == id.Subject {
		return "[oidc:" + id.Subject + "]"
	}
	return id.Name + " [oidc:" + id.Subject + "]"
}

// TokenVerifier checks the JWT access tokens of the OpenID Provider
// (*signin.Verifier). Errors: signin.ErrInvalidToken naming the check
// that failed.
type TokenVerifier interface {
	VerifyAccessToken(ctx context.Context, raw string) (signin.Identity, error)
}

var _ TokenVerifier = (*signin.Verifier)(nil)

// Sessions is the UI's sign-in through the OpenID Provider
// (*signin.Sessions): it serves the sign-in routes (signin.PathLogin and
// the others) and finds a request's session.
type Sessions interface {
	http.Handler
	// Lookup returns the request's live session. Errors:
	// signin.ErrNoSession; signin.ErrCSRF for a state-changing request
	// without the session's CSRF token.
	Lookup(r *http.Request) (signin.Session, error)
}

var _ Sessions = (*signin.Sessions)(nil)

// authenticate finds who the request comes from: a static bearer token,
// else a JWT access token of the OpenID Provider; without an
// Authorization header, the UI's session cookie.
func (s *Server) authenticate(c echo.Context) (Principal, error) {
	header := c.Request().Header.Get(echo.HeaderAuthorization)
	if header == "" && s.deps.Sessions != nil {
		return s.sessionPrincipal(c)
	}
	secret, ok := bearer(header)
	if !ok {
		return Principal{}, ErrUnauthenticated
	}
	if t, ok := s.auth.Load().find(secret); ok {
		return tokenPrincipal(t), nil
	}
	if s.deps.Tokens == nil || !signin.LooksLikeJWT(secret) {
		return Principal{}, ErrUnauthenticated
	}
	ctx := c.Request().Context()
	id, err := s.deps.Tokens.VerifyAccessToken(ctx, secret)
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelInfo, "bearer token refused", slog.String("request_id", requestID(c)), slog.String("reason", err.Error()))
		return Principal{}, fmt.Errorf("bearer token: %w", ErrUnauthenticated)
	}
	p := identityPrincipal(id, ViaJWT, jwtID(secret))
	if len(p.Roles) == 0 {
		return p, fmt.Errorf("%q (subject %q) holds no claim value mapped to a role: %w", id.Name, id.Subject, ErrNoRole)
	}
	return p, nil
}

// sessionPrincipal is the principal of the request's UI session.
func (s *Server) sessionPrincipal(c echo.Context) (Principal, error) {
	sess, err := s.deps.Sessions.Lookup(c.Request())
	switch {
	case errors.Is(err, signin.ErrNoSession):
		return Principal{}, fmt.Errorf("no bearer token and no session: %w", ErrUnauthenticated)
	case err != nil:
		return Principal{}, err // signin.ErrCSRF: 403
	}
	p := identityPrincipal(sess.Identity, ViaSession, sess.ID)
	if len(p.Roles) == 0 {
		return p, fmt.Errorf("%q (subject %q) holds no claim value mapped to a role: %w", sess.Identity.Name, sess.Identity.Subject, ErrNoRole)
	}
	return p, nil
}

// require admits requests whose principal has one of roles (or admin).
func (s *Server) require(roles ...Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p, err := s.authenticate(c)
			if err != nil {
				return err
			}
			c.Set(principalKey, p)
			if !p.may(roles) {
				return fmt.Errorf("%s %q may not call %s %s: %w", p.Role, p.Name, c.Request().Method, c.Path(), ErrForbidden)
			}
			return next(c)
		}
	}
}

// principal is who an authenticated request comes from.
func principal(c echo.Context) Principal {
	p, _ := c.Get(principalKey).(Principal)
	return p
}

// SetTokens replaces the static bearer tokens (a reload of
// REVIEWLEDGER_TOKENS_FILE): from the next request on, a token no longer
// listed is refused. Invalid tokens are refused and the old ones kept.
func (s *Server) SetTokens(tokens []Token) error {
	if err := validateTokens(tokens); err != nil {
		return err
	}
	s.auth.Store(newAuthenticator(tokens))
	return nil
}

// jwtID is a JWT's jti claim, read without verifying (the token has been
// verified), or "" when it has none.
func jwtID(raw string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return ""
	}
	body, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var claims struct {
		ID string `json:"jti"`
	}
	if json.Unmarshal(body, &claims) != nil {
		return ""
	}
	return claims.ID
}
