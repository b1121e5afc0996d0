package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"
)

// The browser tests drive the page in headless Chromium against fakeAPI.
// They skip only when no Chromium is installed and CI is unset; in CI a
// missing browser is a failure. UI_SCREENSHOTS=<dir> saves a screenshot of
// each main screen there.

const (
	moderatorToken = "moderator-token-alice-0001"
	auditorToken   = "auditor-token-audrey-0001"
	stepTimeout    = 30 * time.Second // a bound for a loaded CI machine, not a measurement
	waitTimeout    = 20 * time.Second
)

func chromiumPath(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		t.Skip("chromium is not installed (apt-get install -y chromium); in CI this test fails instead")
	}
	t.Fatal("chromium not found and CI is set: install it (apt-get install -y chromium) or set CHROMIUM to its path")
	return ""
}

// browserPage is one Chromium tab and what its console reported.
type browserPage struct {
	t    *testing.T
	ctx  context.Context
	base string

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

func newBrowserPage(t *testing.T, base string) *browserPage {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 1000),
		chromedp.Env("TZ=UTC"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	p := &browserPage{t: t, ctx: ctx, base: base}
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	done := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			p.mu.Lock()
			p.console = append(p.console, m)
			p.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
	})
	return p
}

// problems returns console errors and exceptions, leaving out the
// browser's own notes about HTTP error statuses, which the tests provoke.
func (p *browserPage) problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, m := range p.console {
		if m.Source == "network" {
			continue
		}
		if m.Type == chromedp.ConsoleError || m.IsException() || m.Type == chromedp.ConsoleWarning {
			out = append(out, m.String())
		}
	}
	return out
}

func (p *browserPage) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.t.Fatalf("%s: %v", what, err)
	}
}

func evaluate[T any](p *browserPage, expr string) T {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitFor waits until the JavaScript function, called with args, returns
// true; on timeout it fails with what and the element's text.
func (p *browserPage) waitFor(what, fn string, args ...any) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, waitTimeout+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](fn,
		chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(waitTimeout),
		chromedp.WithPollingArgs(args...)))
	if err != nil {
		body := evaluate[string](p, `document.body.innerText`)
		p.t.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, body)
	}
}

const visibleTextJS = `(sel, want) => {
	const e = document.querySelector(sel);
	return !!e && !e.closest('[hidden]') && e.textContent.includes(want);
}`

// waitText waits until the element is shown and its text contains want.
func (p *browserPage) waitText(sel, want string) {
	p.t.Helper()
	p.waitFor(sel+" to show "+want, visibleTextJS, sel, want)
}

func (p *browserPage) waitGone(sel string) {
	p.t.Helper()
	p.waitFor(sel+" to be gone", `(sel) => !document.querySelector(sel)`, sel)
}

func (p *browserPage) waitHidden(sel string) {
	p.t.Helper()
	p.waitFor(sel+" to be hidden", `(sel) => { const e = document.querySelector(sel); return !!e && !!e.closest('[hidden]'); }`, sel)
}

func (p *browserPage) text(sel string) string {
	p.t.Helper()
	return evaluate[string](p, `document.querySelector(`+jsString(sel)+`).textContent`)
}

func (p *browserPage) click(sel string) {
	p.t.Helper()
	p.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

func (p *browserPage) typeText(sel, s string) {
	p.t.Helper()
	p.do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), s, chromedp.NodeVisible))
}

func (p *browserPage) hasClass(sel, class string) bool {
	p.t.Helper()
	return evaluate[bool](p, `document.querySelector(`+jsString(sel)+`).classList.contains(`+jsString(class)+`)`)
}

func (p *browserPage) screenshot(name string) {
	p.t.Helper()
	dir := os.Getenv("UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func row(id string) string { return `#queue-body tr[data-review-id="` + id + `"]` }

func newFakeSLO(total, within, escalated, conflicts int64, p50, p90, p99 float64, depth, oldest int64) sloJSON {
	s := sloJSON{Total: total, CompletedWithinBudget: within, Escalated: escalated, ConflictingCompletions: conflicts}
	if total > 0 {
		s.WithinBudgetRatio = float64(within) / float64(total)
	}
	s.LatencyMS.P50, s.LatencyMS.P90, s.LatencyMS.P99 = p50, p90, p99
	s.ManualQueue.Depth, s.ManualQueue.OldestAgeSeconds = depth, oldest
	return s
}

// TestBrowserModerationAndDashboard walks a moderator and then an auditor
// through the page: sign-in, the queue, claims, a stale and a good
// decision, a four-eyes vote, the SLO dashboard, token loss and sign-out.
func TestBrowserModerationAndDashboard(t *testing.T) {
	fake := newFakeAPI(time.Now)
	fake.addToken(moderatorToken, "moderator", "alice")
	fake.addToken(auditorToken, "auditor", "audrey")
	const xss = `provider timed out <img src=x onerror="window.__pwned=1">`
	fake.escalate("rev-caption-0001", "caption_suggestion", "attempts_exhausted", 3, 4*time.Minute, 1, []string{xss})
	fake.escalate("rev-publish-0002", "publishing_rule", "human_gate", 1, 2*time.Hour, 1, nil)
	fake.claimAs("rev-publish-0002", "bob", time.Now().Add(8*time.Minute))
	fake.setSLO("1h", newFakeSLO(1234, 1077, 41, 3, 850, 4200, 12800, 2, 7300))
	fake.setSLO("24h", newFakeSLO(28000, 27860, 120, 0, 700, 3100, 9900, 2, 7300))
	srv := httptest.NewServer(fake.handler())
	t.Cleanup(srv.Close)

	p := newBrowserPage(t, srv.URL)

	t.Run("page is served with its security policy", func(t *testing.T) {
		res, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Fatalf("Content-Security-Policy %q", csp)
		}
		p.do("open the page", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		if got := evaluate[string](p, `document.activeElement.id`); got != "token" {
			t.Errorf("focus on %q, want the token field", got)
		}
		p.screenshot("signin")
	})

	t.Run("a wrong token returns to sign in", func(t *testing.T) {
		p.typeText("#token", "not-a-valid-token-0000"+kb.Enter)
		p.waitText("#signin-error", "The server did not accept the token")
		p.waitText("#signin-error", "Request ID: req-")
		if evaluate[bool](p, `sessionStorage.getItem('reviewledger.token') !== null`) {
			t.Error("a refused token stayed in sessionStorage")
		}
		p.waitHidden("#queue-view")
	})

	t.Run("the queue shows both items", func(t *testing.T) {
		p.typeText("#token", moderatorToken+kb.Enter)
		p.waitText(row("rev-caption-0001"), "caption_suggestion")
		p.waitText(row("rev-publish-0002"), "publishing_rule")
		p.waitText("#queue-count", "2 reviews waiting")
		first := p.text(row("rev-caption-0001"))
		for _, want := range []string{"attempts exhausted", "3", "4 min", "Unclaimed"} {
			if !strings.Contains(first, want) {
				t.Errorf("first row %q lacks %q", first, want)
			}
		}
		second := p.text(row("rev-publish-0002"))
		for _, want := range []string{"human gate", "2 h", "Claimed by bob until"} {
			if !strings.Contains(second, want) {
				t.Errorf("second row %q lacks %q", second, want)
			}
		}
		if !p.hasClass(row("rev-publish-0002")+" td.age", "crit") {
			t.Error("a two-hour-old queue item is not marked critical")
		}
		// The age is live: it moves without a new request.
		age := p.text(row("rev-caption-0001") + " td.age")
		p.waitFor("the age to tick", `(sel, was) => document.querySelector(sel).textContent !== was`, row("rev-caption-0001")+" td.age", age)

		reqs := fake.requestsTo(http.MethodGet, "/v1/manual-queue")
		if last := reqs[len(reqs)-1]; last.Auth != "Bearer "+moderatorToken || last.Query.Get("limit") != "100" {
			t.Errorf("last queue request %+v, want the moderator's token and limit 100", last)
		}
		p.screenshot("queue")
	})

	t.Run("claim an item", func(t *testing.T) {
		p.click(row("rev-caption-0001") + " button.claim")
		p.waitText("#queue-notice", "You claimed rev-caption-0001 until")
		p.waitText(row("rev-caption-0001")+" td.claim-cell", "Claimed by you until")
		p.waitText("#who", "Signed in as alice")
		claims := fake.requestsTo(http.MethodPost, "/v1/manual-queue/rev-caption-0001/claim")
		if len(claims) != 1 || claims[0].Body != "" {
			t.Errorf("claim requests %+v, want one without a body", claims)
		}
	})

	t.Run("a claim held by another moderator shows who and until when", func(t *testing.T) {
		p.click(row("rev-publish-0002") + " button.claim")
		p.waitText("#queue-error", "Review rev-publish-0002 is claimed by bob until")
		p.waitText("#queue-error", "HTTP 409")
		if id := p.text("#queue-error .request-id"); !strings.HasPrefix(id, "req-") {
			t.Errorf("request ID %q", id)
		}
	})

	t.Run("open a review with the keyboard", func(t *testing.T) {
		p.do("focus the review link", chromedp.Focus(chromedp.CSS(row("rev-caption-0001")+" a")), chromedp.KeyEvent(kb.Enter))
		p.waitText("#review-state", "manual review")
		p.waitText("#rv-version", "7")
		p.waitText("#rv-reasons", `<img src=x onerror="window.__pwned=1">`)
		if evaluate[bool](p, `document.querySelector('#rv-reasons img') !== null || window.__pwned !== undefined`) {
			t.Fatal("a reason was parsed as markup")
		}
		p.waitText("#timeline-msg", "shown to auditors")
		if got := evaluate[string](p, `document.activeElement.id`); got != "review-title" {
			t.Errorf("focus on %q after opening, want review-title", got)
		}
		if got := evaluate[string](p, `location.hash`); got != "#/reviews/rev-caption-0001" {
			t.Errorf("location.hash %q", got)
		}
	})

	const note = "Caption checked against the source; fine."
	t.Run("a decision on a stale version asks to reload", func(t *testing.T) {
		fake.vote("rev-caption-0001", "carol") // the review moves to version 8
		p.typeText("#decision-note", note)
		p.click("#decide-accept")
		p.waitText("#decision-error", "The review changed since you opened it — reload")
		p.waitText("#decision-error", "expected version 7, the review is at 8")
		decisions := fake.requestsTo(http.MethodPost, "/v1/reviews/rev-caption-0001/decision")
		if len(decisions) != 1 {
			t.Fatalf("%d decision requests, want 1", len(decisions))
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(decisions[0].Body), &body); err != nil {
			t.Fatal(err)
		}
		if body["state"] != "accepted" || body["note"] != note || body["expected_version"] != float64(7) {
			t.Errorf("decision body %v", body)
		}
		if got := evaluate[string](p, `document.getElementById('decision-note').value`); got != note {
			t.Errorf("note after the conflict %q, want it kept", got)
		}
		p.screenshot("conflict")
	})

	t.Run("reload, accept with a note, and the item leaves the queue", func(t *testing.T) {
		p.click("#decision-reload")
		p.waitText("#rv-version", "8")
		p.waitText("#decision-version", "8")
		p.click("#decide-accept")
		p.waitText("#decision-result", "Decision recorded: accepted")
		p.waitText("#review-state", "accepted")
		p.waitHidden("#decision-form")
		p.waitGone(row("rev-caption-0001"))
		p.waitText("#queue-count", "1 review waiting")
		ev := fake.lastEvent("rev-caption-0001")
		if ev.Type != "ManualDecisionRecorded" || ev.Data["note"] != note || ev.Data["moderator"] != "alice" {
			t.Errorf("last event %+v", ev)
		}
	})

	t.Run("a four-eyes vote keeps the review in manual review", func(t *testing.T) {
		fake.escalate("rev-restricted-0003", "restricted_publish", "human_gate", 1, 30*time.Second, 2, []string{"restricted material"})
		// No click: the periodic refresh brings the new item in.
		p.waitText(row("rev-restricted-0003"), "restricted_publish")
		p.click(row("rev-restricted-0003") + " a")
		p.waitText("#rv-class", "restricted_publish")
		p.typeText("#decision-note", "Looks restricted to me.")
		p.click("#decide-reject")
		p.waitText("#decision-result", "Your vote to reject is recorded")
		p.waitText("#decision-result", "stays in manual review")
		p.waitText("#review-state", "manual review")
		p.waitText("#rv-version", "4")
		p.waitHidden("#decision-form")
		if got := fake.review("rev-restricted-0003").State; got != "manual_review" {
			t.Errorf("review state %q after one vote", got)
		}
		p.waitText(row("rev-restricted-0003"), "restricted_publish")
		p.screenshot("review")
	})

	t.Run("the page fits a phone screen", func(t *testing.T) {
		p.do("narrow the viewport", chromedp.EmulateViewport(390, 844))
		defer p.do("restore the viewport", chromedp.ResetViewport())
		p.waitText(row("rev-restricted-0003"), "restricted_publish")
		if w := evaluate[int](p, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
			wide := evaluate[string](p, `Array.from(document.querySelectorAll('body *'))
				.filter((e) => e.getBoundingClientRect().right > window.innerWidth && !e.closest('[hidden]') && !e.closest('.table-wrap'))
				.slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')`)
			t.Errorf("the page is %d px wider than a 390 px screen: %s", w, wide)
		}
		p.screenshot("phone")
	})

	t.Run("the SLO dashboard shows the numbers and alerts", func(t *testing.T) {
		p.click("#nav-slo")
		p.waitText("#slo-total", "1,234")
		p.waitText("#slo-ratio", "87.3%")
		p.waitText("#slo-ratio-sub", "1,077 of 1,234")
		p.waitText("#slo-escalated", "41")
		p.waitText("#slo-conflicts", "3")
		p.waitText("#slo-p50", "850 ms")
		p.waitText("#slo-p90", "4.20 s")
		p.waitText("#slo-p99", "12.8 s")
		p.waitText("#slo-depth", "2")
		p.waitText("#slo-oldest", "2 h 1 min")
		p.waitText("#slo-alerts", "Critical")
		p.waitText("#slo-alerts", "Only 87.3% of reviews reached an outcome within budget")
		if !p.hasClass("#tile-ratio", "crit") || !p.hasClass("#tile-oldest", "crit") {
			t.Error("low ratio or old queue item not styled critical")
		}
		p.screenshot("slo-alert")

		p.do("pick 24h and a class",
			chromedp.SetValue(chromedp.CSS("#slo-window"), "24h"),
			chromedp.SendKeys(chromedp.CSS("#slo-class"), "caption_suggestion"),
			chromedp.Click(chromedp.CSS(`#slo-filter button[type="submit"]`)))
		p.waitText("#slo-ratio", "99.5%")
		p.waitText("#slo-total", "28,000")
		if p.hasClass("#tile-ratio", "crit") || p.hasClass("#tile-ratio", "warn") {
			t.Error("a 99.5% ratio is styled as an alert")
		}
		reqs := fake.requestsTo(http.MethodGet, "/v1/slo")
		last := reqs[len(reqs)-1].Query
		if last.Get("window") != "24h" || last.Get("content_class") != "caption_suggestion" {
			t.Errorf("last SLO query %v", last)
		}
		// No click: the dashboard refreshes itself.
		fake.setSLO("24h", newFakeSLO(28001, 27861, 120, 0, 700, 3100, 9900, 1, 60))
		p.waitText("#slo-total", "28,001")
		p.waitText("#slo-depth", "1")
		p.waitHidden("#slo-alerts")
	})

	t.Run("a token that stops working returns to sign in", func(t *testing.T) {
		fake.revoke(moderatorToken)
		p.click("#slo-refresh")
		p.waitText("#signin-error", "The server did not accept the token")
		p.waitHidden("#slo-view")
		if evaluate[bool](p, `sessionStorage.getItem('reviewledger.token') !== null`) {
			t.Error("the revoked token stayed in sessionStorage")
		}
	})

	t.Run("an auditor reads history but not the queue", func(t *testing.T) {
		p.do("go to the queue", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		p.typeText("#token", auditorToken+kb.Enter)
		p.waitText("#queue-error", "Your role cannot do this")
		p.typeText("#lookup-id", "rev-caption-0001"+kb.Enter)
		p.waitText("#review-state", "accepted")
		p.waitHidden("#decision-form")
		p.waitText("#timeline-list", "ManualDecisionRecorded")
		p.waitText("#timeline-list", note)
		p.waitText("#timeline-list", "classification: deadline_exceeded")
		if n := evaluate[int](p, `document.querySelectorAll('#timeline-list > li').length`); n != 10 {
			t.Errorf("%d timeline entries, want 10", n)
		}
		p.screenshot("auditor")
		p.click("#nav-slo")
		p.waitText("#slo-total", "28,001")
	})

	t.Run("sign out forgets the token", func(t *testing.T) {
		p.click("#signout")
		p.waitText("#signin-error", "You signed out.")
		if evaluate[bool](p, `sessionStorage.length !== 0`) {
			t.Error("sessionStorage not cleared")
		}
	})

	t.Run("the token never travels in a URL", func(t *testing.T) {
		fake.mu.Lock()
		defer fake.mu.Unlock()
		for _, r := range fake.requests {
			for _, tok := range []string{moderatorToken, auditorToken} {
				if strings.Contains(r.Path+"?"+r.Query.Encode(), tok) {
					t.Errorf("token in URL %s", r.Path)
				}
			}
		}
	})

	if probs := p.problems(); len(probs) > 0 {
		t.Errorf("browser console reported problems:\n%s", strings.Join(probs, "\n"))
	}
}
