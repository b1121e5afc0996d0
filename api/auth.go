package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
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
)

// ParseTokens parses REVIEWLEDGER_TOKENS: comma-separated role:name:token.
// The token is everything after the second colon. Errors name the setting
// and the entry (by position and name, never by secret).
func ParseTokens(s string) ([]Token, error) {
	var tokens []Token
	for i, entry := range strings.Split(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		parts := strings.SplitN(entry, ":", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("REVIEWLEDGER_TOKENS: entry %d: want role:name:token: %w", i+1, ErrInvalidConfig)
		}
		tokens = append(tokens, Token{Role: Role(parts[0]), Name: parts[1], Secret: parts[2]})
	}
	if err := validateTokens(tokens); err != nil {
		return nil, err
	}
	return tokens, nil
}

func validateTokens(tokens []Token) error {
	seen := make(map[string]bool)
	for i, t := range tokens {
		where := fmt.Sprintf("REVIEWLEDGER_TOKENS: entry %d (%q)", i+1, t.Name)
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

// require admits requests whose token has one of roles (or admin).
func (s *Server) require(roles ...Role) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			secret, ok := bearer(c.Request().Header.Get(echo.HeaderAuthorization))
			if !ok {
				return ErrUnauthenticated
			}
			t, ok := s.auth.find(secret)
			if !ok {
				return ErrUnauthenticated
			}
			c.Set(principalKey, t)
			if t.Role != RoleAdmin && !slices.Contains(roles, t.Role) {
				return fmt.Errorf("%s %q may not call %s %s: %w", t.Role, t.Name, c.Request().Method, c.Path(), ErrForbidden)
			}
			return next(c)
		}
	}
}

// principal is the token of an authenticated request.
func principal(c echo.Context) Token {
	t, _ := c.Get(principalKey).(Token)
	return t
}
