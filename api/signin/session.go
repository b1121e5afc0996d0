package signin

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"
)

// Routes of the UI's sign-in, served by Sessions.
const (
	PathLogin    = "/auth/login"    // GET: to the provider
	PathCallback = "/auth/callback" // GET: back from it
	PathLogout   = "/auth/logout"   // POST (CSRF): sign out, RP-initiated where offered
	PathSession  = "/auth/session"  // GET: the session's CSRF token, or 401
)

// HeaderCSRF carries a session's CSRF token on every state-changing
// request authenticated by the session cookie.
const HeaderCSRF = "X-CSRF-Token"

var (
	// ErrNoSession: the request carries no cookie of a live session.
	ErrNoSession = errors.New("no session")
	// ErrCSRF: a state-changing request of a session lacks its CSRF token.
	ErrCSRF = errors.New("missing or wrong CSRF token")
)

// SessionConfig configures the UI's sign-in.
type SessionConfig struct {
	// RedirectURL is where the provider sends the browser back, ending in
	// PathCallback (REVIEWLEDGER_OIDC_REDIRECT_URL). https, or http on a
	// loopback address (the cookies are then not Secure).
	RedirectURL string
	// Scopes requested; default openid profile email offline_access.
	Scopes []string
	// RefreshInterval: at most this long after sign-in or the last
	// refresh, the session's tokens are refreshed at the provider and its
	// roles read again, so a user removed from a group loses the role at
	// the latest then (REVIEWLEDGER_OIDC_REFRESH_INTERVAL, default 5m).
	RefreshInterval time.Duration
	// MaxAge ends a session however often it is refreshed
	// (REVIEWLEDGER_OIDC_SESSION_MAX_AGE, default 12h).
	MaxAge time.Duration
	// Logger; default slog.Default().
	Logger *slog.Logger
}

func (c *SessionConfig) setDefaults() {
	if len(c.Scopes) == 0 {
		c.Scopes = []string{oidc.ScopeOpenID, "profile", "email", oidc.ScopeOfflineAccess}
	}
	if c.RefreshInterval == 0 {
		c.RefreshInterval = 5 * time.Minute
	}
	if c.MaxAge == 0 {
		c.MaxAge = 12 * time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate names the first setting at fault.
func (c *SessionConfig) Validate() error {
	u, err := url.Parse(c.RedirectURL)
	switch {
	case c.RedirectURL == "":
		return errors.New("REVIEWLEDGER_OIDC_REDIRECT_URL: required with REVIEWLEDGER_OIDC_CLIENT_ID, e.g. https://reviews.example.com" + PathCallback)
	case err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http"):
		return fmt.Errorf("REVIEWLEDGER_OIDC_REDIRECT_URL: %q is not an http(s) URL", c.RedirectURL)
	case u.Path != PathCallback:
		return fmt.Errorf("REVIEWLEDGER_OIDC_REDIRECT_URL: the path must be %s, got %q", PathCallback, u.Path)
	case u.Scheme == "http" && !loopback(u.Hostname()):
		return fmt.Errorf("REVIEWLEDGER_OIDC_REDIRECT_URL: must be https (http only on a loopback address), got %q", c.RedirectURL)
	case c.RefreshInterval < 0:
		return fmt.Errorf("REVIEWLEDGER_OIDC_REFRESH_INTERVAL: must be positive, got %s", c.RefreshInterval)
	case c.MaxAge < 0:
		return fmt.Errorf("REVIEWLEDGER_OIDC_SESSION_MAX_AGE: must be positive, got %s", c.MaxAge)
	}
	return nil
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Session is a signed-in user of the UI.
type Session struct {
	// ID names the session in the content-access record and the logs; it
	// is not the cookie and cannot be used as one.
	ID       string
	Identity Identity
	// CSRF is the token state-changing requests must carry in HeaderCSRF.
	CSRF string
}

func (r Record) session() Session {
	return Session{ID: r.ID, CSRF: r.CSRF, Identity: Identity{Subject: r.Subject, Name: r.Name, Roles: r.Roles, Expiry: r.Expiry}}
}

// Sessions is the UI's sign-in: the authorization code flow with PKCE,
// and server-side sessions in a Store behind a signed, HttpOnly,
// SameSite=Lax cookie (Secure unless the redirect URL is http on
// loopback). A sign-in under way is carried by a signed cookie of its own,
// so the callback may reach another process than the one that started it.
type Sessions struct {
	cfg    SessionConfig
	v      *Verifier
	oauth  *oauth2.Config
	store  Store
	key    []byte // signs the cookies
	secure bool
	now    func() time.Time

	locks sync.Map // session key -> *sync.Mutex: one refresh at a time in this process
}

// NewSessions returns the sign-in of v's provider, its sessions kept in
// store (a MemoryStore when nil). v must have a client ID.
func NewSessions(ctx context.Context, v *Verifier, store Store, cfg SessionConfig) (*Sessions, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if v.id == nil {
		return nil, errors.New("REVIEWLEDGER_OIDC_CLIENT_ID: required for the UI's sign-in")
	}
	if store == nil {
		store = NewMemoryStore()
	}
	key, err := store.Key(ctx)
	if err != nil {
		return nil, fmt.Errorf("sessions: signing key: %w", err)
	}
	u, _ := url.Parse(cfg.RedirectURL)
	return &Sessions{
		cfg: cfg, v: v, store: store, key: key, now: v.cfg.Now,
		secure: u.Scheme == "https",
		oauth: &oauth2.Config{
			ClientID: v.cfg.ClientID, ClientSecret: v.cfg.ClientSecret, RedirectURL: cfg.RedirectURL,
			Endpoint: v.provider.Endpoint(), Scopes: cfg.Scopes,
		},
	}, nil
}

// Cookie names. A Secure cookie is __Host- prefixed: the browser then
// keeps it to this host and path / and never accepts it over http.
func (s *Sessions) cookieName(base string) string {
	if s.secure {
		return "__Host-reviewledger_" + base
	}
	return "reviewledger_" + base
}

func (s *Sessions) setCookie(w http.ResponseWriter, base, value string, maxAge time.Duration) {
	c := &http.Cookie{
		Name: s.cookieName(base), Value: value, Path: "/", HttpOnly: true, Secure: s.secure, SameSite: http.SameSiteLaxMode,
		MaxAge: int(maxAge / time.Second),
	}
	if maxAge < 0 {
		c.MaxAge = -1
	}
	http.SetCookie(w, c)
}

// sign appends the HMAC of value under the store's key.
func (s *Sessions) sign(value string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(value))
	return value + "." + base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// unsigned is the value of a signed cookie whose signature holds.
func (s *Sessions) unsigned(signed string) (string, bool) {
	i := strings.LastIndexByte(signed, '.')
	if i < 0 {
		return "", false
	}
	value := signed[:i]
	return value, hmac.Equal([]byte(s.sign(value)), []byte(signed))
}

func randomString(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

func storeKey(cookieID string) string {
	sum := sha256.Sum256([]byte(cookieID))
	return hex.EncodeToString(sum[:])
}

// ServeHTTP serves the sign-in routes.
func (s *Sessions) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == PathLogin && r.Method == http.MethodGet:
		s.login(w, r)
	case r.URL.Path == PathCallback && r.Method == http.MethodGet:
		s.callback(w, r)
	case r.URL.Path == PathLogout && r.Method == http.MethodPost:
		s.logout(w, r)
	case r.URL.Path == PathSession && r.Method == http.MethodGet:
		s.current(w, r)
	default:
		http.NotFound(w, r)
	}
}

const pendingTTL = 10 * time.Minute

// login sends the browser to the provider with a fresh state, nonce and
// PKCE verifier, which travel in a signed cookie (HttpOnly, ten minutes):
// only the browser that started a sign-in can finish it.
func (s *Sessions) login(w http.ResponseWriter, r *http.Request) {
	state, nonce, verifier := randomString(24), randomString(24), oauth2.GenerateVerifier()
	at := strconv.FormatInt(s.now().Unix(), 10)
	s.setCookie(w, "login", s.sign(strings.Join([]string{state, nonce, verifier, at}, "~")), pendingTTL)
	http.Redirect(w, r, s.oauth.AuthCodeURL(state, oidc.Nonce(nonce), oauth2.S256ChallengeOption(verifier)), http.StatusFound)
}

// pendingOf reads the sign-in under way of the request's login cookie.
func (s *Sessions) pendingOf(r *http.Request, state string) (nonce, verifier string, ok bool) {
	c, err := r.Cookie(s.cookieName("login"))
	if err != nil {
		return "", "", false
	}
	value, ok := s.unsigned(c.Value)
	parts := strings.Split(value, "~")
	if !ok || len(parts) != 4 || subtle.ConstantTimeCompare([]byte(parts[0]), []byte(state)) != 1 {
		return "", "", false
	}
	at, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || s.now().Sub(time.Unix(at, 0)) > pendingTTL {
		return "", "", false
	}
	return parts[1], parts[2], true
}

// callback finishes a sign-in: the code is exchanged with the PKCE
// verifier, the ID token verified (issuer, audience, nonce, signature),
// the roles mapped. A user with no role gets a page that says so.
func (s *Sessions) callback(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	if e := q.Get("error"); e != "" {
		s.page(w, http.StatusUnauthorized, "Sign-in failed", "The identity provider answered: "+e+" "+q.Get("error_description"))
		return
	}
	nonce, verifier, ok := s.pendingOf(r, q.Get("state"))
	if !ok || q.Get("state") == "" {
		s.page(w, http.StatusBadRequest, "Sign-in failed", "This sign-in was not started in this browser, or took too long. Sign in again.")
		return
	}
	s.setCookie(w, "login", "", -1)
	tok, err := s.oauth.Exchange(s.v.clientContext(ctx), q.Get("code"), oauth2.VerifierOption(verifier))
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "sign-in: code exchange failed", "err", err.Error())
		s.page(w, http.StatusBadGateway, "Sign-in failed", "The identity provider did not accept the sign-in. Sign in again.")
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, id, err := s.v.verifyIDToken(ctx, raw)
	if err == nil && subtle.ConstantTimeCompare([]byte(idt.Nonce), []byte(nonce)) != 1 {
		err = fmt.Errorf("nonce does not match: %w", ErrInvalidToken)
	}
	if err != nil {
		s.cfg.Logger.WarnContext(ctx, "sign-in: ID token refused", "err", err.Error())
		s.page(w, http.StatusUnauthorized, "Sign-in failed", "The identity provider's answer could not be verified. Sign in again.")
		return
	}
	if len(id.Roles) == 0 {
		s.cfg.Logger.InfoContext(ctx, "sign-in refused: no role mapped", "subject", id.Subject, "name", id.Name)
		s.page(w, http.StatusForbidden, "No access",
			fmt.Sprintf("You signed in as %s, but your account has no role in reviewledger: none of your %s maps to a role. Ask an administrator to add you to a group with access.", id.Name, s.v.cfg.RolesClaim))
		return
	}
	now := s.now()
	// Sessions past their age go with every new sign-in.
	if err := s.store.Sweep(ctx, now.Add(-s.cfg.MaxAge)); err != nil {
		s.cfg.Logger.WarnContext(ctx, "sessions: sweep", "err", err.Error())
	}
	cookieID := randomString(32)
	key := storeKey(cookieID)
	rec := Record{
		Key: key, ID: key[:16], Subject: id.Subject, Name: id.Name, Roles: id.Roles, CSRF: randomString(32),
		RefreshToken: tok.RefreshToken, IDToken: raw, Created: now,
	}
	rec.schedule(now, id.Expiry, s.cfg.RefreshInterval)
	if err := s.store.Create(ctx, rec); err != nil {
		s.cfg.Logger.ErrorContext(ctx, "sign-in: session not stored", "err", err.Error())
		s.page(w, http.StatusServiceUnavailable, "Sign-in failed", "The session could not be stored. Try again in a moment.")
		return
	}
	s.cfg.Logger.InfoContext(ctx, "signed in", "session", rec.ID, "subject", id.Subject, "name", id.Name, "roles", id.Roles)
	s.setCookie(w, "session", s.sign(cookieID), s.cfg.MaxAge)
	http.Redirect(w, r, "/", http.StatusFound)
}

// schedule sets when the session is checked at the provider next: after
// the refresh interval, or when its ID token expires if sooner. A session
// without a refresh token cannot be checked: it lasts until its ID token
// expires.
func (r *Record) schedule(now, expiry time.Time, interval time.Duration) {
	r.CheckAt = now.Add(interval)
	if !expiry.IsZero() && (expiry.Before(r.CheckAt) || r.RefreshToken == "") {
		r.CheckAt = expiry
	}
	r.Expiry = expiry
}

// Lookup returns the live session of the request's cookie, refreshing it
// at the provider when due (its roles are then read again). Errors:
// ErrNoSession (no cookie, a forged or unknown one, an ended session);
// for a state-changing method, ErrCSRF unless HeaderCSRF carries the
// session's token; the store's errors.
func (s *Sessions) Lookup(r *http.Request) (Session, error) {
	ctx := r.Context()
	key, rec, err := s.find(r)
	if err != nil {
		return Session{}, err
	}
	now := s.now()
	if now.Sub(rec.Created) > s.cfg.MaxAge {
		s.end(ctx, rec, "session reached its maximum age")
		return Session{}, ErrNoSession
	}
	if !now.Before(rec.CheckAt) {
		if rec, err = s.renew(ctx, key, now); err != nil {
			return Session{}, err
		}
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
	default:
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderCSRF)), []byte(rec.CSRF)) != 1 {
			return rec.session(), ErrCSRF
		}
	}
	return rec.session(), nil
}

// refreshTimeout bounds a session's refresh at the provider and its
// write, which no request's end cuts short.
const refreshTimeout = 30 * time.Second

// renew refreshes a due session, one refresh at a time in this process;
// when the refresh fails because another process refreshed it first (a
// rotated refresh token), that process's result is used. The refresh runs
// to its end even when the request goes away (a browser navigating away
// cancels its fetches): cut short after the provider rotated the refresh
// token, the session would keep the old one and its next refresh be
// refused.
func (s *Sessions) renew(ctx context.Context, key string, now time.Time) (Record, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
	defer cancel()
	mu, _ := s.locks.LoadOrStore(key, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer func() {
		mu.(*sync.Mutex).Unlock()
		s.locks.Delete(key)
	}()
	rec, err := s.store.Get(ctx, key)
	if err != nil {
		return Record{}, err
	}
	if now.Before(rec.CheckAt) {
		return rec, nil // refreshed while this request waited
	}
	next, rerr := s.refresh(ctx, rec, now)
	if rerr == nil {
		if err := s.store.Update(ctx, next); err != nil {
			return Record{}, err
		}
		return next, nil
	}
	if again, err := s.store.Get(ctx, key); err == nil && now.Before(again.CheckAt) {
		return again, nil
	}
	s.end(ctx, rec, rerr.Error())
	return Record{}, ErrNoSession
}

func (s *Sessions) find(r *http.Request) (string, Record, error) {
	c, err := r.Cookie(s.cookieName("session"))
	if err != nil {
		return "", Record{}, ErrNoSession
	}
	id, ok := s.unsigned(c.Value)
	if !ok {
		return "", Record{}, ErrNoSession
	}
	key := storeKey(id)
	rec, err := s.store.Get(r.Context(), key)
	return key, rec, err
}

func (s *Sessions) end(ctx context.Context, rec Record, why string) {
	if err := s.store.Delete(ctx, rec.Key); err != nil {
		s.cfg.Logger.WarnContext(ctx, "session not deleted", "session", rec.ID, "err", err.Error())
	}
	s.cfg.Logger.InfoContext(ctx, "session ended", "session", rec.ID, "subject", rec.Subject, "why", why)
}

// refresh trades the refresh token for new tokens and reads the roles
// again from the new ID token (or the userinfo endpoint when the provider
// sends none on refresh).
func (s *Sessions) refresh(ctx context.Context, rec Record, now time.Time) (Record, error) {
	if rec.RefreshToken == "" {
		return Record{}, errors.New("session expired and has no refresh token")
	}
	ctx = s.v.clientContext(ctx)
	tok, err := s.oauth.TokenSource(ctx, &oauth2.Token{RefreshToken: rec.RefreshToken}).Token()
	if err != nil {
		return Record{}, fmt.Errorf("refresh at the provider: %w", err)
	}
	var id Identity
	if raw, _ := tok.Extra("id_token").(string); raw != "" {
		idt, got, err := s.v.verifyIDToken(ctx, raw)
		if err != nil {
			return Record{}, fmt.Errorf("refreshed ID token: %w", err)
		}
		if idt.Subject != rec.Subject {
			return Record{}, errors.New("refreshed ID token names another subject")
		}
		id, rec.IDToken = got, raw
	} else {
		info, err := s.v.provider.UserInfo(ctx, oauth2.StaticTokenSource(tok))
		if err != nil {
			return Record{}, fmt.Errorf("userinfo after refresh: %w", err)
		}
		var claims map[string]any
		if err := info.Claims(&claims); err != nil || info.Subject != rec.Subject {
			return Record{}, errors.New("userinfo after refresh names another subject")
		}
		id = s.v.identityFrom(info.Subject, claims, tok.Expiry)
	}
	if tok.RefreshToken != "" {
		rec.RefreshToken = tok.RefreshToken
	}
	rec.Name, rec.Roles = id.Name, id.Roles
	rec.schedule(now, id.Expiry, s.cfg.RefreshInterval)
	if len(id.Roles) == 0 {
		s.cfg.Logger.InfoContext(ctx, "session lost its roles at refresh", "session", rec.ID, "subject", id.Subject)
	}
	return rec, nil
}

// sessionView is the body of GET PathSession.
type sessionView struct {
	Session   string   `json:"session"`
	Subject   string   `json:"subject"`
	Name      string   `json:"name"`
	Roles     []string `json:"roles"`
	CSRFToken string   `json:"csrf_token"`
}

// current is GET PathSession: the session's CSRF token and who it is, or
// 401 when the request has no live session.
func (s *Sessions) current(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	sess, err := s.Lookup(r)
	if err != nil {
		if !errors.Is(err, ErrNoSession) {
			s.cfg.Logger.WarnContext(r.Context(), "session not read", "err", err.Error())
		}
		writeJSON(w, http.StatusUnauthorized, map[string]any{"signed_in": false, "login": PathLogin})
		return
	}
	roles := sess.Identity.Roles
	if roles == nil {
		roles = []string{}
	}
	writeJSON(w, http.StatusOK, sessionView{Session: sess.ID, Subject: sess.Identity.Subject, Name: sess.Identity.Name, Roles: roles, CSRFToken: sess.CSRF})
}

// logout is POST PathLogout with the CSRF token: the session ends here,
// and the answer names where the browser goes next: the provider's
// end_session_endpoint (RP-initiated logout, with the ID token as hint
// and back to the UI) when its discovery document has one, the UI
// otherwise.
func (s *Sessions) logout(w http.ResponseWriter, r *http.Request) {
	next := "/"
	_, rec, err := s.find(r)
	if err == nil {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get(HeaderCSRF)), []byte(rec.CSRF)) != 1 {
			writeJSON(w, http.StatusForbidden, map[string]any{"error": ErrCSRF.Error()})
			return
		}
		s.end(r.Context(), rec, "signed out")
		if end := s.v.EndSessionURL(); end != "" {
			if u, perr := url.Parse(end); perr == nil {
				back, _ := url.Parse(s.cfg.RedirectURL)
				back.Path, back.RawQuery = "/", ""
				q := u.Query()
				q.Set("client_id", s.oauth.ClientID)
				q.Set("post_logout_redirect_uri", back.String())
				if rec.IDToken != "" {
					q.Set("id_token_hint", rec.IDToken)
				}
				u.RawQuery = q.Encode()
				next = u.String()
			}
		}
	}
	s.setCookie(w, "session", "", -1)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, map[string]any{"signed_out": true, "redirect": next})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{.Title}} · reviewledger</title>
<meta name="viewport" content="width=device-width, initial-scale=1"></head>
<body><main><h1 id="signin-message-title">{{.Title}}</h1><p id="signin-message">{{.Message}}</p>
<p><a id="signin-again" href="/">Back to reviewledger</a></p></main></body></html>
`))

// page answers a plain HTML page: the outcomes of a sign-in a browser
// shows.
func (s *Sessions) page(w http.ResponseWriter, status int, title, message string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	w.WriteHeader(status)
	_ = pageTemplate.Execute(w, struct{ Title, Message string }{title, message})
}
