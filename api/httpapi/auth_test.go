package httpapi

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	got, err := ParseTokens(" submitter:platform:aaaaaaaaaaaaaaaa , admin:root:b:with:colons:0123456789,")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != (Token{RoleSubmitter, "platform", "aaaaaaaaaaaaaaaa"}) || got[1].Secret != "b:with:colons:0123456789" {
		t.Fatalf("got %v", got)
	}
	if strings.Contains(got[0].String(), "aaaa") {
		t.Fatalf("String() shows the secret: %s", got[0])
	}
	for name, in := range map[string]string{
		"short":        "submitter:platform:short",
		"role":         "owner:platform:aaaaaaaaaaaaaaaa",
		"shape":        "submitter-aaaaaaaaaaaaaaaa",
		"empty name":   "submitter::aaaaaaaaaaaaaaaa",
		"used twice":   "submitter:a:aaaaaaaaaaaaaaaa,auditor:b:aaaaaaaaaaaaaaaa",
		"white space":  "submitter:a:aaaaaaaa aaaaaaaa",
		"second entry": "submitter:a:aaaaaaaaaaaaaaaa,auditor:b:x",
	} {
		_, err := ParseTokens(in)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "REVIEWLEDGER_TOKENS") {
			t.Errorf("%s: got %v, want an error naming REVIEWLEDGER_TOKENS", name, err)
		}
		if err != nil && strings.Contains(err.Error(), "aaaaaaaa") {
			t.Errorf("%s: error shows the secret: %v", name, err)
		}
	}
	if _, err := New(Config{Tokens: []Token{{Role: RoleAdmin, Name: "x", Secret: "short"}}}, Deps{Ledger: nil}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New with a short token: %v", err)
	}
}

// route is one row of docs/contracts.md §2 with an authenticated role table.
type route struct {
	method, path string
	roles        []Role
}

var protected = []route{
	{"POST", "/v1/reviews", []Role{RoleSubmitter}},
	{"GET", "/v1/reviews/r1", []Role{RoleSubmitter, RoleModerator, RoleAuditor}},
	{"GET", "/v1/reviews/r1/events", []Role{RoleAuditor}},
	{"GET", "/v1/manual-queue", []Role{RoleModerator}},
	{"POST", "/v1/manual-queue/r1/claim", []Role{RoleModerator}},
	{"POST", "/v1/reviews/r1/decision", []Role{RoleModerator}},
	{"GET", "/v1/slo", []Role{RoleAuditor, RoleModerator}},
	{"GET", "/v1/slo/series", []Role{RoleAuditor, RoleModerator}},
	{"GET", "/v1/slo/attempts", []Role{RoleAuditor, RoleModerator}},
	{"GET", "/v1/slo/providers", []Role{RoleAuditor, RoleModerator}},
	{"GET", "/v1/slo/providers/series", []Role{RoleAuditor, RoleModerator}},
}

func TestRoleTable(t *testing.T) {
	h := newHarness(t)
	tokenOf := map[Role]string{RoleSubmitter: submitterToken, RoleModerator: moderatorToken, RoleAuditor: auditorToken, RoleAdmin: adminToken}
	for _, rt := range protected {
		name := rt.method + " " + rt.path
		// No token, an unknown token, a malformed header: 401.
		for _, hdr := range []string{"", "Bearer nope-nope-nope-nope", "Basic " + adminToken, "Bearer", "Bearer " + adminToken + "x"} {
			rec := h.do(rt.method, rt.path, "", "", "Authorization", hdr)
			wantProblem(t, rec, http.StatusUnauthorized, "unauthenticated", "")
			if !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s: no WWW-Authenticate challenge", name)
			}
		}
		for role, token := range tokenOf {
			allowed := role == RoleAdmin
			for _, r := range rt.roles {
				allowed = allowed || r == role
			}
			rec := h.do(rt.method, rt.path, token, "")
			switch {
			case allowed && (rec.Code == http.StatusUnauthorized || rec.Code == http.StatusForbidden):
				t.Errorf("%s as %s: %d, want admitted: %s", name, role, rec.Code, rec.Body)
			case !allowed:
				wantProblem(t, rec, http.StatusForbidden, "forbidden", "")
			}
		}
	}
	// The bearer scheme is case-insensitive (RFC 9110).
	if rec := h.do("GET", "/v1/reviews/nope", "", "", "Authorization", "bearer "+auditorToken); rec.Code != http.StatusNotFound {
		t.Fatalf("lower-case scheme: %d %s", rec.Code, rec.Body)
	}
}

func TestPublicRoutesNeedNoToken(t *testing.T) {
	h := newHarness(t)
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/openapi.json"} {
		if rec := h.do("GET", p, "", ""); rec.Code != http.StatusOK {
			t.Errorf("GET %s: %d %s", p, rec.Code, rec.Body)
		}
	}
}

func TestSecretsNeverLogged(t *testing.T) {
	h := newHarness(t)
	h.do("GET", "/v1/slo", auditorToken, "")
	h.do("GET", "/v1/slo", "wrong-token-0000000000", "")
	h.do("POST", "/v1/reviews", submitterToken, submitJSON("r1", "caption_suggestion", "secret content"))
	logs := h.logs.String()
	for _, s := range []string{auditorToken, "wrong-token-0000000000", submitterToken, "secret content"} {
		if strings.Contains(logs, s) {
			t.Errorf("logs contain %q:\n%s", s, logs)
		}
	}
	if !strings.Contains(logs, `"actor":"audrey"`) {
		t.Errorf("logs do not name the acting token:\n%s", logs)
	}
}
