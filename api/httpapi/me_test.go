package httpapi

import (
	"net/http"
	"testing"
)

func TestMe(t *testing.T) {
	h := newHarness(t)
	for _, tc := range []struct{ token, name, role string }{
		{submitterToken, "platform", "submitter"},
		{moderatorToken, "mona", "moderator"},
		{moderator2, "max", "moderator"},
		{auditorToken, "audrey", "auditor"},
		{adminToken, "root", "admin"},
	} {
		rec := h.do("GET", "/v1/me", tc.token, "")
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" {
			t.Fatalf("%s: %d %q %s", tc.name, rec.Code, rec.Header().Get("Content-Type"), rec.Body)
		}
		m := keys(t, rec.Body.Bytes())
		wantKeys(t, m, "name", "role")
		if got := decode[meView](t, rec); got.Name != tc.name || string(got.Role) != tc.role {
			t.Errorf("%s: %+v, want %s %s", tc.token, got, tc.name, tc.role)
		}
	}
	wantProblem(t, h.do("GET", "/v1/me", "", ""), http.StatusUnauthorized, "unauthenticated", "")
	wantProblem(t, h.do("GET", "/v1/me", "not-a-known-token-000", ""), http.StatusUnauthorized, "unauthenticated", "")
	wantProblem(t, h.do("POST", "/v1/me", adminToken, ""), http.StatusMethodNotAllowed, "method-not-allowed", "")
}
