// Package signintest runs a real OpenID Provider on loopback for tests:
// the example OP of github.com/zitadel/oidc (its login page, discovery,
// key set, authorization code flow with PKCE, refresh tokens,
// end_session), with users whose groups a test changes, signing keys a
// test rotates, JWT access tokens, and helpers that sign in without a
// browser or mint tokens the provider never issued.
package signintest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	zoidc "github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/text/language"
)

// The client reviewledger signs in as.
const (
	ClientID     = "reviewledger"
	ClientSecret = "reviewledger-client-secret-of-32-bytes+"
)

// Password is every test user's password.
const Password = "correct-horse-battery"

// User is one account of the provider.
type User struct {
	ID, Username, First, Last string
	Groups                    []string
}

// Provider is a running OP.
type Provider struct {
	// Issuer is the issuer URL, "http://127.0.0.1:<port>/".
	Issuer string

	srv     *http.Server
	store   *opStorage
	visited sync.Map // request paths seen

	foreignOnce sync.Once // the key of MintForeign, never published
	foreign     *rsa.PrivateKey
	foreignErr  error
	// Client reaches the provider; its connections are closed when the
	// test ends. Give it to the verifier under test.
	Client *http.Client
}

// Start runs the provider on a loopback port until the test ends, with
// users (their passwords are Password). Redirects to any loopback
// /auth/callback are allowed.
func Start(tb testing.TB, users ...User) *Provider {
	tb.Helper()
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	issuer := "http://" + l.Addr().String() + "/"
	us := &userStore{users: map[string]*User{}}
	for i := range users {
		u := users[i]
		us.users[u.ID] = &u
	}
	client := storage.WebClient(ClientID, ClientSecret, "http://127.0.0.1/auth/callback")
	base := storage.NewStorageWithClients(us, map[string]*storage.Client{ClientID: client})
	st := &opStorage{Storage: base, users: us, client: client}
	st.rotate()
	p := &Provider{Issuer: issuer, store: st, Client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}}
	op := exampleop.SetupServer(issuer, st, nil, false)
	p.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.visited.Store(r.URL.Path, true)
		op.ServeHTTP(w, r)
	})}
	go func() { _ = p.srv.Serve(l) }()
	tb.Cleanup(func() {
		_ = p.srv.Close()
		p.Client.CloseIdleConnections()
	})
	return p
}

// Visited tells whether a request for path reached the provider, such as
// "/end_session" (its end_session_endpoint).
func (p *Provider) Visited(path string) bool {
	_, ok := p.visited.Load(path)
	return ok
}

// SetGroups replaces a user's groups; tokens issued from then on carry
// them, those issued before keep the old ones until they expire.
func (p *Provider) SetGroups(userID string, groups ...string) {
	p.store.users.mu.Lock()
	defer p.store.users.mu.Unlock()
	p.store.users.users[userID].Groups = slices.Clone(groups)
}

// Rotate makes a new signing key current. The key set keeps the old one
// unless drop, when only the new key is published.
func (p *Provider) Rotate(drop bool) {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	p.store.rotateLocked(drop)
}

// KeyID is the current signing key's ID.
func (p *Provider) KeyID() string {
	p.store.mu.Lock()
	defer p.store.mu.Unlock()
	return p.store.keys[len(p.store.keys)-1].id
}

// Claims are the standard claims of a minted token; Extra adds others.
type Claims struct {
	Issuer, Subject, Name string
	Audience              []string
	IssuedAt, NotBefore   time.Time
	Expiry                time.Time
	Groups                []string
	Extra                 map[string]any
}

func (c Claims) json() map[string]any {
	m := map[string]any{"iss": c.Issuer, "sub": c.Subject, "aud": c.Audience, "exp": c.Expiry.Unix(), "iat": c.IssuedAt.Unix()}
	if !c.NotBefore.IsZero() {
		m["nbf"] = c.NotBefore.Unix()
	}
	if c.Name != "" {
		m["name"] = c.Name
	}
	if c.Groups != nil {
		m["groups"] = c.Groups
	}
	for k, v := range c.Extra {
		m[k] = v
	}
	return m
}

// Valid are claims the provider would issue now for a user of groups.
func (p *Provider) Valid(subject string, groups ...string) Claims {
	now := time.Now()
	return Claims{Issuer: p.Issuer, Subject: subject, Audience: []string{ClientID}, IssuedAt: now, Expiry: now.Add(5 * time.Minute), Groups: groups}
}

// Mint signs claims with the provider's current key, as the provider
// would: the tests of what a verifier refuses start from it.
func (p *Provider) Mint(tb testing.TB, c Claims) string {
	tb.Helper()
	p.store.mu.Lock()
	k := p.store.keys[len(p.store.keys)-1]
	p.store.mu.Unlock()
	return sign(tb, jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: k.key, KeyID: k.id}}, c)
}

// MintForeign signs claims with a key the provider never published,
// under the current key's ID: a token re-signed by someone else.
func (p *Provider) MintForeign(tb testing.TB, c Claims) string {
	tb.Helper()
	p.foreignOnce.Do(func() { p.foreign, p.foreignErr = rsa.GenerateKey(rand.Reader, 2048) })
	if p.foreignErr != nil {
		tb.Fatal(p.foreignErr)
	}
	return sign(tb, jose.SigningKey{Algorithm: jose.RS256, Key: jose.JSONWebKey{Key: p.foreign, KeyID: p.KeyID()}}, c)
}

// MintHMAC signs claims with HS256 keyed by the client's secret: the
// algorithm confusion a verifier must refuse.
func (p *Provider) MintHMAC(tb testing.TB, c Claims) string {
	tb.Helper()
	return sign(tb, jose.SigningKey{Algorithm: jose.HS256, Key: []byte(ClientSecret)}, c)
}

// MintNone is claims with "alg": "none" and no signature.
func (p *Provider) MintNone(tb testing.TB, c Claims) string {
	tb.Helper()
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`))
	body, err := json.Marshal(c.json())
	if err != nil {
		tb.Fatal(err)
	}
	return header + "." + base64.RawURLEncoding.EncodeToString(body) + "."
}

func sign(tb testing.TB, key jose.SigningKey, c Claims) string {
	tb.Helper()
	signer, err := jose.NewSigner(key, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		tb.Fatal(err)
	}
	body, err := json.Marshal(c.json())
	if err != nil {
		tb.Fatal(err)
	}
	jws, err := signer.Sign(body)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := jws.CompactSerialize()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// OAuth2 is the client configuration of reviewledger at this provider,
// redirecting to redirectURL.
func (p *Provider) OAuth2(redirectURL string) *oauth2.Config {
	return &oauth2.Config{
		ClientID: ClientID, ClientSecret: ClientSecret, RedirectURL: redirectURL,
		Endpoint: oauth2.Endpoint{AuthURL: p.Issuer + "auth", TokenURL: p.Issuer + "oauth/token", AuthStyle: oauth2.AuthStyleInHeader},
		Scopes:   []string{"openid", "profile", "email", "offline_access"},
	}
}

// SignIn goes through the provider's login page without a browser, as
// username, and returns the tokens: a JWT access token, an ID token
// (Extra "id_token") and a refresh token.
func (p *Provider) SignIn(ctx context.Context, username string) (*oauth2.Token, error) {
	const redirect = "http://127.0.0.1/auth/callback"
	cfg := p.OAuth2(redirect)
	verifier := oauth2.GenerateVerifier()
	authURL := cfg.AuthCodeURL("state-1", oauth2.S256ChallengeOption(verifier))
	var code string
	hc := &http.Client{Timeout: 10 * time.Second, Transport: p.Client.Transport, CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(req.URL.String(), redirect) {
			code = req.URL.Query().Get("code")
			return http.ErrUseLastResponse
		}
		return nil
	}}
	at, err := landing(ctx, hc, authURL)
	if err != nil {
		return nil, err
	}
	id := at.Query().Get("authRequestID")
	if id == "" {
		return nil, fmt.Errorf("sign in: the provider did not show its login page (at %s)", at)
	}
	form := url.Values{"id": {id}, "username": {username}, "password": {Password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"login/username", strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	_ = res.Body.Close()
	if code == "" {
		return nil, fmt.Errorf("sign in as %s: no code (status %d)", username, res.StatusCode)
	}
	return cfg.Exchange(p.clientContext(ctx), code, oauth2.VerifierOption(verifier))
}

// landing follows u's redirects and returns where they end.
func landing(ctx context.Context, hc *http.Client, u string) (*url.URL, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	_ = res.Body.Close()
	return res.Request.URL, nil
}

// Refresh trades a refresh token for new tokens.
func (p *Provider) Refresh(ctx context.Context, refreshToken string) (*oauth2.Token, error) {
	return p.OAuth2("").TokenSource(p.clientContext(ctx), &oauth2.Token{RefreshToken: refreshToken}).Token()
}

func (p *Provider) clientContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, p.Client)
}

// userStore is storage.UserStore over User, whose groups change.
type userStore struct {
	mu    sync.Mutex
	users map[string]*User
}

func (s *userStore) get(id string) (User, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	u, ok := s.users[id]
	if !ok {
		return User{}, false
	}
	return *u, true
}

func (s *userStore) toStorage(u User) *storage.User {
	return &storage.User{
		ID: u.ID, Username: u.Username, Password: Password, FirstName: u.First, LastName: u.Last,
		Email: u.Username + "@example.test", EmailVerified: true, PreferredLanguage: language.English,
	}
}

func (s *userStore) GetUserByID(id string) *storage.User {
	u, ok := s.get(id)
	if !ok {
		return nil
	}
	return s.toStorage(u)
}

func (s *userStore) GetUserByUsername(name string) *storage.User {
	s.mu.Lock()
	var found *User
	for _, u := range s.users {
		if u.Username == name {
			c := *u
			found = &c
		}
	}
	s.mu.Unlock()
	if found == nil {
		return nil
	}
	return s.toStorage(*found)
}

func (s *userStore) ExampleClientID() string { return storage.ServiceUserID }

// opStorage is the example storage with this kit's users' groups in
// every token and userinfo, JWT access tokens, and rotating keys.
type opStorage struct {
	*storage.Storage
	users  *userStore
	client *storage.Client

	mu   sync.Mutex
	keys []*signingKey // the last is current
}

type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ k *signingKey }

func (p publicKey) ID() string                         { return p.k.id }
func (p publicKey) Algorithm() jose.SignatureAlgorithm { return jose.RS256 }
func (p publicKey) Use() string                        { return "sig" }
func (p publicKey) Key() any                           { return &p.k.key.PublicKey }

func (s *opStorage) rotate() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rotateLocked(false)
}

func (s *opStorage) rotateLocked(drop bool) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(key.N.Bytes())
	k := &signingKey{id: base64.RawURLEncoding.EncodeToString(sum[:8]), key: key}
	if drop {
		s.keys = nil
	}
	s.keys = append(s.keys, k)
}

func (s *opStorage) SigningKey(context.Context) (op.SigningKey, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1], nil
}

func (s *opStorage) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{jose.RS256}, nil
}

func (s *opStorage) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]op.Key, 0, len(s.keys))
	for _, k := range s.keys {
		keys = append(keys, publicKey{k})
	}
	return keys, nil
}

func (s *opStorage) GetClientByClientID(ctx context.Context, id string) (op.Client, error) {
	if id != ClientID {
		return s.Storage.GetClientByClientID(ctx, id)
	}
	return client{s.client}, nil
}

func (s *opStorage) groups(userID string) []string {
	u, _ := s.users.get(userID)
	return u.Groups
}

func (s *opStorage) withGroups(userinfo *zoidc.UserInfo, userID string) {
	userinfo.AppendClaims("groups", s.groups(userID))
}

func (s *opStorage) SetUserinfoFromRequest(ctx context.Context, userinfo *zoidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := s.Storage.SetUserinfoFromRequest(ctx, userinfo, token, scopes); err != nil {
		return err
	}
	s.withGroups(userinfo, token.GetSubject())
	return nil
}

func (s *opStorage) SetUserinfoFromToken(ctx context.Context, userinfo *zoidc.UserInfo, tokenID, subject, origin string) error {
	if err := s.Storage.SetUserinfoFromToken(ctx, userinfo, tokenID, subject, origin); err != nil {
		return err
	}
	s.withGroups(userinfo, subject)
	return nil
}

func (s *opStorage) GetPrivateClaimsFromScopes(ctx context.Context, userID, clientID string, scopes []string) (map[string]any, error) {
	claims, err := s.Storage.GetPrivateClaimsFromScopes(ctx, userID, clientID, scopes)
	if err != nil {
		return nil, err
	}
	if claims == nil {
		claims = map[string]any{}
	}
	claims["groups"] = s.groups(userID)
	if u, ok := s.users.get(userID); ok {
		claims["name"] = strings.TrimSpace(u.First + " " + u.Last)
	}
	return claims, nil
}

// client is reviewledger's client: JWT access tokens, the profile in the
// ID token, any loopback redirect.
type client struct{ *storage.Client }

func (client) AccessTokenType() op.AccessTokenType  { return op.AccessTokenTypeJWT }
func (client) IDTokenUserinfoClaimsAssertion() bool { return true }
func (client) RedirectURIGlobs() []string {
	return []string{"http://127.0.0.1:*/auth/callback", "http://localhost:*/auth/callback"}
}
func (client) PostLogoutRedirectURIGlobs() []string {
	return []string{"http://127.0.0.1:*/", "http://127.0.0.1:*/*", "http://localhost:*/*"}
}

var _ op.HasRedirectGlobs = client{}
