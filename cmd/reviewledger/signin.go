package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/reviewledger/reviewledger/api/httpapi"
	"github.com/reviewledger/reviewledger/api/signin"
)

// SignInConfig is who may call the API beside REVIEWLEDGER_TOKENS: the
// tokens of a file reloaded on SIGHUP, and the users and services of an
// OpenID Provider (docs/operations.md, Sign-in).
type SignInConfig struct {
	TokensFile   string        `name:"tokens-file" env:"REVIEWLEDGER_TOKENS_FILE" help:"File of bearer tokens, one role:name:token a line (# comments), added to REVIEWLEDGER_TOKENS and read again on SIGHUP: a token removed from it is refused from the reload on."`
	Issuer       string        `name:"oidc-issuer" env:"REVIEWLEDGER_OIDC_ISSUER" help:"OpenID Provider's issuer URL: JWT access tokens it signs are accepted as bearer tokens, and the UI signs in through it when REVIEWLEDGER_OIDC_CLIENT_ID is set."`
	ClientID     string        `name:"oidc-client-id" env:"REVIEWLEDGER_OIDC_CLIENT_ID" help:"reviewledger's client ID at the provider, for the UI's sign-in (authorization code flow with PKCE); the default audience of access tokens."`
	ClientSecret string        `name:"oidc-client-secret" env:"REVIEWLEDGER_OIDC_CLIENT_SECRET" help:"The client's secret (confidential client); empty for a public client, PKCE alone."`
	Audience     string        `name:"oidc-audience" env:"REVIEWLEDGER_OIDC_AUDIENCE" help:"The aud a JWT access token must carry; REVIEWLEDGER_OIDC_CLIENT_ID when empty."`
	RolesClaim   string        `name:"oidc-roles-claim" env:"REVIEWLEDGER_OIDC_ROLES_CLAIM" default:"groups" help:"Claim holding the user's groups or roles (a string or a list; a dotted path reaches into objects, e.g. realm_access.roles)."`
	RoleMapList  string        `name:"oidc-role-map" env:"REVIEWLEDGER_OIDC_ROLE_MAP" help:"Roles from claim values: comma-separated role=value, several values separated by |, e.g. moderator=mods|leads,auditor=audit. A user with no mapped role is refused (403 no-role)."`
	RedirectURL  string        `name:"oidc-redirect-url" env:"REVIEWLEDGER_OIDC_REDIRECT_URL" help:"Where the provider sends the browser back after sign-in: this server's URL with the path /auth/callback (https; http only on a loopback address). Required with REVIEWLEDGER_OIDC_CLIENT_ID."`
	Scopes       []string      `name:"oidc-scopes" env:"REVIEWLEDGER_OIDC_SCOPES" default:"openid,profile,email,offline_access" help:"Scopes the UI's sign-in requests (offline_access asks for the refresh token that keeps a session checked at the provider)."`
	Refresh      time.Duration `name:"oidc-refresh-interval" env:"REVIEWLEDGER_OIDC_REFRESH_INTERVAL" default:"5m" help:"At most this long after sign-in or the last refresh, a UI session is refreshed at the provider and its roles read again: a user removed from a group loses the role by then."`
	MaxAge       time.Duration `name:"oidc-session-max-age" env:"REVIEWLEDGER_OIDC_SESSION_MAX_AGE" default:"12h" help:"A UI session ends this long after sign-in, however often it was refreshed."`
	Leeway       time.Duration `name:"oidc-leeway" env:"REVIEWLEDGER_OIDC_LEEWAY" default:"30s" help:"How far past expiry or before not-before a token is still accepted (clock skew), at most 5m."`

	// Filled by Validate.
	RoleMap map[string][]string `kong:"-"`
}

var roleNames = []string{string(httpapi.RoleSubmitter), string(httpapi.RoleModerator), string(httpapi.RoleAuditor), string(httpapi.RoleAdmin)}

// Validate checks the settings and parses the role map.
func (c *SignInConfig) Validate() error {
	if c.TokensFile != "" {
		if _, err := readTokenFile(c.TokensFile); err != nil {
			return err
		}
	}
	if c.Issuer == "" {
		for _, set := range []struct{ name, v string }{
			{"REVIEWLEDGER_OIDC_CLIENT_ID", c.ClientID}, {"REVIEWLEDGER_OIDC_CLIENT_SECRET", c.ClientSecret},
			{"REVIEWLEDGER_OIDC_AUDIENCE", c.Audience}, {"REVIEWLEDGER_OIDC_ROLE_MAP", c.RoleMapList},
			{"REVIEWLEDGER_OIDC_REDIRECT_URL", c.RedirectURL},
		} {
			if set.v != "" {
				return fmt.Errorf("%s: set without REVIEWLEDGER_OIDC_ISSUER", set.name)
			}
		}
		return nil
	}
	m, err := signin.ParseRoleMap(c.RoleMapList, roleNames)
	if err != nil {
		return err
	}
	c.RoleMap = m
	cfg := c.verifierConfig()
	if err := cfg.Validate(); err != nil {
		return err
	}
	if c.ClientID == "" {
		if c.RedirectURL != "" {
			return fmt.Errorf("REVIEWLEDGER_OIDC_REDIRECT_URL: set without REVIEWLEDGER_OIDC_CLIENT_ID")
		}
		return nil
	}
	sc := c.sessionConfig(nil)
	return sc.Validate()
}

func (c *SignInConfig) sessionConfig(log *slog.Logger) signin.SessionConfig {
	return signin.SessionConfig{RedirectURL: c.RedirectURL, Scopes: c.Scopes, RefreshInterval: c.Refresh, MaxAge: c.MaxAge, Logger: log}
}

// sessions is the UI's sign-in, its sessions in store; nil without a
// client ID.
func (c *SignInConfig) sessions(ctx context.Context, v *signin.Verifier, store signin.Store, log *slog.Logger) (*signin.Sessions, error) {
	if v == nil || c.ClientID == "" {
		return nil, nil
	}
	return signin.NewSessions(ctx, v, store, c.sessionConfig(log))
}

func (c *SignInConfig) verifierConfig() signin.Config {
	aud := c.Audience
	if aud == "" {
		aud = c.ClientID
	}
	return signin.Config{
		Issuer: c.Issuer, Audience: aud, ClientID: c.ClientID, ClientSecret: c.ClientSecret,
		RolesClaim: c.RolesClaim, RoleMap: c.RoleMap, Leeway: c.Leeway,
	}
}

// verifier reads the provider's discovery document; nil without an
// issuer.
func (c *SignInConfig) verifier(ctx context.Context) (*signin.Verifier, error) {
	if c.Issuer == "" {
		return nil, nil
	}
	return signin.NewVerifier(ctx, c.verifierConfig())
}

// readTokenFile reads and parses REVIEWLEDGER_TOKENS_FILE.
func readTokenFile(path string) ([]httpapi.Token, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("REVIEWLEDGER_TOKENS_FILE: %w", err)
	}
	return httpapi.ParseTokenFile(string(b))
}

// allTokens is REVIEWLEDGER_TOKENS and the file's tokens; a name may not
// be used twice across both.
func (c *SignInConfig) allTokens(env []httpapi.Token) ([]httpapi.Token, error) {
	tokens := slices.Clone(env)
	if c.TokensFile == "" {
		return tokens, nil
	}
	file, err := readTokenFile(c.TokensFile)
	if err != nil {
		return nil, err
	}
	for _, t := range file {
		if slices.ContainsFunc(tokens, func(e httpapi.Token) bool { return e.Name == t.Name }) {
			return nil, fmt.Errorf("REVIEWLEDGER_TOKENS_FILE: name %q is used twice (REVIEWLEDGER_TOKENS or the file)", t.Name)
		}
		if slices.ContainsFunc(tokens, func(e httpapi.Token) bool { return e.Secret == t.Secret }) {
			return nil, fmt.Errorf("REVIEWLEDGER_TOKENS_FILE: the token of %q is used twice (REVIEWLEDGER_TOKENS or the file)", t.Name)
		}
		tokens = append(tokens, t)
	}
	return tokens, nil
}

// reloadTokens reads the token file again on every SIGHUP until ctx is
// done. A file that does not parse is logged and the tokens in force are
// kept.
func (c *SignInConfig) reloadTokens(ctx context.Context, env []httpapi.Token, server *httpapi.Server, log *slog.Logger) {
	if c.TokensFile == "" {
		return
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		tokens, err := c.allTokens(env)
		if err == nil {
			err = server.SetTokens(tokens)
		}
		if err != nil {
			log.Warn("tokens not reloaded; the tokens in force are kept", "err", strings.TrimSpace(err.Error()))
			continue
		}
		log.Info("tokens reloaded", "file", c.TokensFile, "tokens", len(tokens))
	}
}
