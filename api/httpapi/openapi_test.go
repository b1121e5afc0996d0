package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api"
	"github.com/reviewledger/reviewledger/api/contentaccess"
	"github.com/reviewledger/reviewledger/api/notify"
	"github.com/reviewledger/reviewledger/api/queuefeed"
	"github.com/reviewledger/reviewledger/projections"
)

type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
	Comps   struct {
		Schemas   map[string]json.RawMessage `json:"schemas"`
		Responses map[string]json.RawMessage `json:"responses"`
	} `json:"components"`
	ProblemTypes map[string]int `json:"x-problem-types"`
	// MethodNotAllowed is the 405 every route answers to a method it does
	// not have: no operation's response, so described beside them.
	MethodNotAllowed struct {
		Response struct {
			Headers map[string]json.RawMessage `json:"headers"`
			Content map[string]json.RawMessage `json:"content"`
		} `json:"response"`
	} `json:"x-method-not-allowed"`
}

type openAPIOperation struct {
	Roles     []string                   `json:"x-roles"`
	Responses map[string]json.RawMessage `json:"responses"`
}

var echoParam = regexp.MustCompile(`:([a-z_]+)`)

// TestOpenAPIMatchesRoutes fails when a registered route is missing from
// the document, the document names a route the server lacks, or the roles
// differ from the ones the route enforces.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	h := newHarness(t, func(_ *Config, d *Deps) { d.UI = http.NotFoundHandler() })
	rec := h.do("GET", "/openapi.json", "", "")
	if rec.Code != http.StatusOK {
		t.Fatalf("%d", rec.Code)
	}
	var doc openAPIDoc
	if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	served := map[string]bool{}
	for _, r := range h.srv.Echo().Routes() {
		if strings.HasPrefix(r.Method, "echo_") {
			continue
		}
		path := strings.Replace(echoParam.ReplaceAllString(r.Path, "{$1}"), "*", "{path}", 1)
		key := r.Method + " " + path
		served[key] = true
		op, ok := doc.Paths[path][strings.ToLower(r.Method)]
		if !ok {
			t.Errorf("route %s is not in openapi.json", key)
			continue
		}
		// The roles the route enforces, probed with one token per role.
		probe := strings.Replace(echoParam.ReplaceAllString(r.Path, "r1"), "*", "app.js", 1)
		var enforced []string
		anyRejected := false
		for _, tk := range []struct {
			role  Role
			token string
		}{{RoleSubmitter, submitterToken}, {RoleModerator, moderatorToken}, {RoleAuditor, auditorToken}} {
			code := h.do(r.Method, probe, tk.token, "").Code
			if code == http.StatusForbidden {
				anyRejected = true
				continue
			}
			enforced = append(enforced, string(tk.role))
		}
		if !anyRejected && h.do(r.Method, probe, "", "").Code != http.StatusUnauthorized {
			enforced = nil // public
		}
		if anyRejected && len(enforced) == 0 {
			enforced = []string{string(RoleAdmin)} // refused to every other role
		}
		sort.Strings(enforced)
		documented := slices.Sorted(slices.Values(op.Roles))
		if !slices.Equal(enforced, documented) {
			t.Errorf("%s: enforces roles %v, documented %v", key, enforced, documented)
		}
		var want []string
		if len(enforced) > 0 {
			want = append(want, "401")
		}
		if anyRejected {
			want = append(want, "403")
		}
		for _, code := range want {
			if _, ok := op.Responses[code]; !ok {
				t.Errorf("%s: response %s not documented", key, code)
			}
		}
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if key := strings.ToUpper(method) + " " + path; !served[key] {
				t.Errorf("openapi.json documents %s, which is not served", key)
			}
		}
	}
	// Every $ref resolves and every problem kind of the error table is
	// documented with its status.
	for _, ref := range regexp.MustCompile(`"\$ref":\s*"#/components/(schemas|responses|headers)/([A-Za-z0-9-]+)"`).FindAllStringSubmatch(rec.Body.String(), -1) {
		var ok bool
		switch ref[1] {
		case "schemas":
			_, ok = doc.Comps.Schemas[ref[2]]
		case "responses":
			_, ok = doc.Comps.Responses[ref[2]]
		default:
			ok = ref[2] == "X-Request-Id"
		}
		if !ok {
			t.Errorf("unresolved $ref %s", ref[0])
		}
	}
	for _, row := range append(h.srv.problems, internalProblem) {
		if got, ok := doc.ProblemTypes[ProblemTypeBase+row.kind]; !ok || got != row.status {
			t.Errorf("problem type %s (%d) documented as %d", row.kind, row.status, got)
		}
		if row.status == http.StatusMethodNotAllowed {
			continue // x-method-not-allowed, checked below
		}
		if _, ok := doc.Comps.Responses["Problem"+strconv.Itoa(row.status)]; !ok {
			t.Errorf("no Problem%d response", row.status)
		}
	}
	// x-method-not-allowed: a method a documented path does not have is a
	// 405 problem whose Allow names the path's methods and OPTIONS, which
	// is answered 204 with the same Allow.
	mna := doc.MethodNotAllowed.Response
	if _, ok := mna.Content[MIMEProblem]; !ok {
		t.Errorf("x-method-not-allowed: no %s response", MIMEProblem)
	}
	for _, name := range []string{"Allow", echo.HeaderXRequestID} {
		if _, ok := mna.Headers[name]; !ok {
			t.Errorf("x-method-not-allowed: header %s not documented", name)
		}
	}
	for path, ops := range doc.Paths {
		probe := strings.NewReplacer("{id}", "r1", "{path}", "app.js").Replace(path)
		allow := []string{http.MethodOptions}
		for method := range ops {
			allow = append(allow, strings.ToUpper(method))
		}
		slices.Sort(allow)
		for method, status := range map[string]int{http.MethodPatch: http.StatusMethodNotAllowed, http.MethodOptions: http.StatusNoContent} {
			rec := h.do(method, probe, "", "")
			got := strings.Split(rec.Header().Get("Allow"), ", ")
			slices.Sort(got)
			if rec.Code != status || !slices.Equal(got, allow) {
				t.Errorf("%s %s: %d with Allow %v, want %d with Allow %v", method, probe, rec.Code, got, status, allow)
			}
		}
	}
}

// TestOpenAPISchemasMatchTypes fails when a documented schema and the Go
// type serving it disagree: every field the type writes is documented and
// every required property is one the type writes.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Required   []string                   `json:"required"`
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for name, typ := range map[string]reflect.Type{
		"Review":            reflect.TypeFor[reviewView](),
		"CallbackResult":    reflect.TypeFor[callbackView](),
		"Claim":             reflect.TypeFor[claimView](),
		"Release":           reflect.TypeFor[releaseView](),
		"Hold":              reflect.TypeFor[holdView](),
		"HoldRequest":       reflect.TypeFor[holdBody](),
		"Requeue":           reflect.TypeFor[requeueBody](),
		"BulkRequest":       reflect.TypeFor[bulkBody](),
		"BulkResult":        reflect.TypeFor[bulkView](),
		"QueueChange":       reflect.TypeFor[queuefeed.Change](),
		"Timeline":          reflect.TypeFor[timelineView](),
		"SLO":               reflect.TypeFor[projections.SLOSummary](),
		"SLOSeries":         reflect.TypeFor[projections.Series](),
		"SLOAttempts":       reflect.TypeFor[attemptsView](),
		"SLOProviders":      reflect.TypeFor[projections.ProviderReport](),
		"SLOProviderSeries": reflect.TypeFor[projections.ProviderSeries](),
		"Problem":           reflect.TypeFor[Problem](),
		"Ready":             reflect.TypeFor[readyView](),
		"SubmitRequest":     reflect.TypeFor[submitBody](),
		"Decision":          reflect.TypeFor[decisionBody](),
		"Me":                reflect.TypeFor[meView](),
		"ContentAccess":     reflect.TypeFor[contentaccess.Access](),
		"ContentAccessList": reflect.TypeFor[contentAccessView](),
		"Delivery":          reflect.TypeFor[notify.Delivery](),
		"Deliveries":        reflect.TypeFor[deliveriesView](),
		"WebhookEvent":      reflect.TypeFor[notify.Body](),
		"AuditCheckpoint":   reflect.TypeFor[checkpointView](),
		"ManualQueueItem":   reflect.TypeFor[projections.QueueItem](),
		"ManualQueue":       reflect.TypeFor[projections.Queue](),
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("schema %s missing", name)
			continue
		}
		fields := jsonFields(typ)
		for _, f := range fields {
			if _, ok := s.Properties[f]; !ok {
				t.Errorf("%s: field %q of %s is not documented", name, f, typ)
			}
		}
		for _, r := range s.Required {
			if !slices.Contains(fields, r) {
				t.Errorf("%s: required property %q is not written by %s", name, r, typ)
			}
		}
	}
}

func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out = append(out, name)
	}
	return out
}

// TestRefusedBeforeRouting checks the RefusedBeforeRouting response the
// document lists on the operations that answer no other client error: the
// HTTP server of the serve process (and of the probes-only listener)
// answers a request with headers over its limit 431, a malformed one 400
// and an unknown expectation 417, in plain text, before any route (no
// X-Request-Id).
func TestRefusedBeforeRouting(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Ref string `json:"$ref"`
			} `json:"responses"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for path, ops := range doc.Paths {
		for method, op := range ops {
			if op.Responses["4XX"].Ref == "#/components/responses/RefusedBeforeRouting" {
				listed = append(listed, strings.ToUpper(method)+" "+path)
			}
		}
	}
	if len(listed) == 0 {
		t.Fatal("no operation lists RefusedBeforeRouting")
	}
	h := newHarness(t)
	serve := func(handler http.Handler) string {
		srv := h.srv.httpServer("127.0.0.1:0", handler)
		var conns sync.WaitGroup
		srv.ConnState = func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				conns.Done()
			}
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = srv.Serve(l) }()
		t.Cleanup(func() {
			_ = srv.Close()
			<-done
			conns.Wait() // a refused connection lingers a moment before it closes
		})
		return l.Addr().String()
	}
	apiAddr, probesAddr := serve(h.srv.Handler()), serve(h.srv.probes)
	for _, key := range listed {
		method, path, _ := strings.Cut(key, " ")
		addrs := []string{apiAddr}
		if path != "/openapi.json" {
			addrs = append(addrs, probesAddr)
		}
		for _, addr := range addrs {
			for _, tc := range []struct {
				name    string
				request string
				status  int
			}{
				{"headers over the limit", method + " " + path + " HTTP/1.1\r\nHost: x\r\nX-Pad: " + strings.Repeat("a", 80<<10) + "\r\n\r\n", http.StatusRequestHeaderFieldsTooLarge},
				{"no Host header", method + " " + path + " HTTP/1.1\r\n\r\n", http.StatusBadRequest},
				{"an unknown expectation", method + " " + path + " HTTP/1.1\r\nHost: x\r\nExpect: 200-ok\r\n\r\n", http.StatusExpectationFailed},
			} {
				status, header := rawRequest(t, addr, tc.request)
				ct := header.Get(echo.HeaderContentType)
				if status != tc.status || (ct != "" && !strings.HasPrefix(ct, echo.MIMETextPlain)) || header.Get(echo.HeaderXRequestID) != "" {
					t.Errorf("%s, %s on %s: %d %q, X-Request-Id %q; want %d in plain text before routing",
						key, tc.name, addr, status, ct, header.Get(echo.HeaderXRequestID), tc.status)
				}
			}
		}
	}
}

// rawRequest writes request as it is on a new connection to addr and reads
// the answer's status and headers.
func rawRequest(t *testing.T, addr, request string) (int, http.Header) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, request); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode, res.Header
}
