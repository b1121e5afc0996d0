package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
	"github.com/reviewledger/reviewledger/projections"
)

// The browser test drives the page in headless Chromium (package uitest)
// against uitest.FakeAPI. It skips only when no Chromium is installed and CI is
// unset; in CI a missing browser is a failure. UI_SCREENSHOTS=<dir> saves a
// screenshot of each main screen there.

const (
	moderatorToken = "moderator-token-alice-0001"
	auditorToken   = "auditor-token-audrey-0001"
	submitterToken = "submitter-token-sam-00001"
)

var row = uitest.Row

func newFakeSLO(total, within, escalated, conflicts int64, p50, p90, p99 float64, depth, oldest int64) uitest.SLOJSON {
	s := uitest.SLOJSON{Total: total, CompletedWithinBudget: within, Escalated: escalated, ConflictingCompletions: conflicts}
	if total > 0 {
		s.WithinBudgetRatio = float64(within) / float64(total)
	}
	s.LatencyMS.P50, s.LatencyMS.P90, s.LatencyMS.P99 = p50, p90, p99
	s.ManualQueue.Depth, s.ManualQueue.OldestAgeSeconds = depth, float64(oldest)
	return s
}

// TestBrowserModerationAndDashboard walks a moderator and then an auditor
// through the page: sign-in, the queue, claims, a stale and a good
// decision, a four-eyes vote, the SLO dashboard, token loss and sign-out.
func TestBrowserModerationAndDashboard(t *testing.T) {
	fake := uitest.NewFakeAPI(time.Now)
	fake.AddToken(moderatorToken, "moderator", "alice")
	fake.AddToken(auditorToken, "auditor", "audrey")
	fake.AddToken(submitterToken, "submitter", "sam")
	const xss = `provider timed out <img src=x onerror="window.__pwned=1">`
	fake.Escalate("rev-caption-0001", "caption_suggestion", "attempts_exhausted", 3, 4*time.Minute, 1, []string{xss})
	fake.Escalate("rev-publish-0002", "publishing_rule", "human_gate", 1, 2*time.Hour, 1, nil)
	fake.ClaimAs("rev-publish-0002", "bob", time.Now().Add(8*time.Minute))
	const submitted = "1\n00:00:01.000 --> 00:00:02.000\n<script>window.__pwned=2</script><b>bold?</b>"
	fake.SetContent("rev-caption-0001", "text/vtt; charset=utf-8", []byte(submitted))
	fake.SetSLO("1h", newFakeSLO(1234, 1077, 41, 3, 850, 4200, 12800, 2, 7300))
	fake.SetSLO("24h", newFakeSLO(28000, 27860, 120, 0, 700, 3100, 9900, 2, 7300))
	srv := httptest.NewServer(serveFake(fake))
	t.Cleanup(srv.Close)

	page := uitest.Start(t, srv.URL)
	run := uitest.InOrder(t) // each step builds on the ones before it

	run("page is served with its security policy", func(t *testing.T) {
		p := page.T(t)
		res, err := http.Get(srv.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if csp := res.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
			t.Fatalf("Content-Security-Policy %q", csp)
		}
		p.Do("open the page", chromedp.Navigate(srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
		// The field has the focus from the start (autofocus), and keeps it
		// once the session probe has answered (no provider here: 404).
		p.WaitFor("the focus on the token field", `() => document.activeElement.id === 'token'`)
		p.WaitFor("the session probe answered", `() => document.getElementById('signin-view').dataset.probed === 'yes'`)
		if got := uitest.Evaluate[string](p, `document.activeElement.id`); got != "token" {
			t.Errorf("focus on %q once the probe answered, want the token field", got)
		}
		p.Screenshot("signin")
	})

	run("a wrong token returns to sign in", func(t *testing.T) {
		p := page.T(t)
		p.SignIn("not-a-valid-token-0000")
		p.WaitText("#signin-error", "The server did not accept the token")
		p.WaitText("#signin-error", "Request ID: req-")
		if uitest.Evaluate[bool](p, `sessionStorage.getItem('reviewledger.token') !== null`) {
			t.Error("a refused token stayed in sessionStorage")
		}
		p.WaitHidden("#queue-view")
	})

	run("the queue shows both items", func(t *testing.T) {
		p := page.T(t)
		p.SignIn(moderatorToken)
		p.WaitText("#who", "Signed in as alice (moderator)")
		p.WaitText(row("rev-caption-0001"), "caption_suggestion")
		p.WaitText(row("rev-publish-0002"), "publishing_rule")
		p.WaitText("#queue-count", "2 reviews waiting")
		first := p.Text(row("rev-caption-0001"))
		for _, want := range []string{"attempts exhausted", "3", "4 min", "Unclaimed"} {
			if !strings.Contains(first, want) {
				t.Errorf("first row %q lacks %q", first, want)
			}
		}
		second := p.Text(row("rev-publish-0002"))
		for _, want := range []string{"human gate", "2 h", "Claimed by bob until"} {
			if !strings.Contains(second, want) {
				t.Errorf("second row %q lacks %q", second, want)
			}
		}
		if !p.HasClass(row("rev-publish-0002")+" td.age", "crit") {
			t.Error("a two-hour-old queue item is not marked critical")
		}
		// The age is live: it moves without a new request.
		age := p.Text(row("rev-caption-0001") + " td.age")
		p.WaitFor("the age to tick", `(sel, was) => document.querySelector(sel).textContent !== was`, row("rev-caption-0001")+" td.age", age)

		reqs := fake.RequestsTo(http.MethodGet, "/v1/manual-queue")
		if last := reqs[len(reqs)-1]; last.Auth != "Bearer "+moderatorToken || last.Query.Get("limit") != "100" {
			t.Errorf("last queue request %+v, want the moderator's token and limit 100", last)
		}
		p.Screenshot("queue")
	})

	run("claim an item", func(t *testing.T) {
		p := page.T(t)
		p.Click(row("rev-caption-0001") + " button.claim")
		p.WaitText("#queue-notice", "You claimed rev-caption-0001 until")
		p.WaitText(row("rev-caption-0001")+" td.claim-cell", "Claimed by you until")
		p.WaitText("#who", "Signed in as alice (moderator)")
		claims := fake.RequestsTo(http.MethodPost, "/v1/manual-queue/rev-caption-0001/claim")
		if len(claims) != 1 || claims[0].Body != "" {
			t.Errorf("claim requests %+v, want one without a body", claims)
		}
	})

	run("a claim held by another moderator shows who and until when", func(t *testing.T) {
		p := page.T(t)
		p.Click(row("rev-publish-0002") + " button.claim")
		p.WaitText("#queue-error", "Review rev-publish-0002 is claimed by bob until")
		p.WaitText("#queue-error", "HTTP 409")
		if id := p.Text("#queue-error .request-id"); !strings.HasPrefix(id, "req-") {
			t.Errorf("request ID %q", id)
		}
	})

	run("open a review with the keyboard", func(t *testing.T) {
		p := page.T(t)
		p.Do("focus the review link", chromedp.Focus(chromedp.CSS(row("rev-caption-0001")+" a")), chromedp.KeyEvent(kb.Enter))
		p.WaitText("#review-state", "manual review")
		p.WaitText("#rv-version", "8") // 7 events, and the claim
		p.WaitText("#rv-reasons", `<img src=x onerror="window.__pwned=1">`)
		if uitest.Evaluate[bool](p, `document.querySelector('#rv-reasons img') !== null || window.__pwned !== undefined`) {
			t.Fatal("a reason was parsed as markup")
		}
		p.WaitHidden("#timeline")
		if n := len(fake.RequestsTo(http.MethodGet, "/v1/reviews/rev-caption-0001/events")); n != 0 {
			t.Errorf("a moderator's page asked for the event history %d times", n)
		}
		if got := uitest.Evaluate[string](p, `document.activeElement.id`); got != "review-title" {
			t.Errorf("focus on %q after opening, want review-title", got)
		}
		if got := uitest.Evaluate[string](p, `location.hash`); got != "#/reviews/rev-caption-0001" {
			t.Errorf("location.hash %q", got)
		}
	})

	run("a moderator reads the submitted content as text", func(t *testing.T) {
		p := page.T(t)
		p.WaitText("#content-text", "<script>window.__pwned=2</script><b>bold?</b>")
		if got := p.Text("#content-text"); got != submitted {
			t.Errorf("content shown %q, want %q", got, submitted)
		}
		if uitest.Evaluate[bool](p, `document.querySelector('#content-text script, #content-text b') !== null || window.__pwned !== undefined`) {
			t.Fatal("the submitted content was parsed as markup")
		}
		p.WaitText("#content-meta", "text/vtt")
		p.WaitText("#content-meta", "(verified)")
		p.WaitHidden("#content-all")
		p.WaitHidden("#content-download")
		reads := fake.RequestsTo(http.MethodGet, "/v1/reviews/rev-caption-0001/content")
		if len(reads) != 1 || reads[0].Auth != "Bearer "+moderatorToken {
			t.Errorf("content requests %+v, want one with the moderator's token", reads)
		}
	})

	run("every control has a label or an accessible name", func(t *testing.T) {
		p := page.T(t)
		unlabelled := uitest.Evaluate[[]string](p, `[
			...Array.from(document.querySelectorAll('input, select, textarea'))
				.filter((e) => e.labels.length === 0 && !e.getAttribute('aria-label')),
			...Array.from(document.querySelectorAll('button, a'))
				.filter((e) => !e.textContent.trim() && !e.getAttribute('aria-label')),
		].map((e) => e.outerHTML)`)
		if len(unlabelled) > 0 {
			t.Errorf("controls without a name:\n%s", strings.Join(unlabelled, "\n"))
		}
	})

	const note = "Caption checked against the source; fine."
	run("a decision on a stale version asks to reload", func(t *testing.T) {
		p := page.T(t)
		fake.Vote("rev-caption-0001", "carol") // the review moves to version 9
		p.Type("#decision-note", note)
		p.Click("#decide-accept")
		p.WaitText("#decision-error", "The review changed since you opened it — reload")
		p.WaitText("#decision-error", "expected version 8, the review is at 9")
		decisions := fake.RequestsTo(http.MethodPost, "/v1/reviews/rev-caption-0001/decision")
		if len(decisions) != 1 {
			t.Fatalf("%d decision requests, want 1", len(decisions))
		}
		var body map[string]any
		if err := json.Unmarshal([]byte(decisions[0].Body), &body); err != nil {
			t.Fatal(err)
		}
		if body["state"] != "accepted" || body["note"] != note || body["expected_version"] != float64(8) {
			t.Errorf("decision body %v", body)
		}
		if got := uitest.Evaluate[string](p, `document.getElementById('decision-note').value`); got != note {
			t.Errorf("note after the conflict %q, want it kept", got)
		}
		p.Screenshot("conflict")
	})

	run("reload, accept with a note, and the item leaves the queue", func(t *testing.T) {
		p := page.T(t)
		p.Click("#decision-reload")
		p.WaitText("#rv-version", "9")
		p.WaitText("#decision-version", "9")
		p.Click("#decide-accept")
		p.WaitText("#decision-result", "Decision recorded: accepted")
		p.WaitText("#review-state", "accepted")
		p.WaitHidden("#decision-form")
		p.WaitGone(row("rev-caption-0001"))
		p.WaitText("#queue-count", "1 review waiting")
		ev := fake.LastEvent("rev-caption-0001")
		if ev.Type != "ManualDecisionRecorded" || ev.Data["note"] != note || ev.Data["moderator"] != "alice" {
			t.Errorf("last event %+v", ev)
		}
	})

	run("a four-eyes vote keeps the review in manual review", func(t *testing.T) {
		p := page.T(t)
		fake.Escalate("rev-restricted-0003", "restricted_publish", "human_gate", 1, 30*time.Second, 2, []string{"restricted material"})
		// No click: the periodic refresh brings the new item in.
		p.WaitText(row("rev-restricted-0003"), "restricted_publish")
		p.Click(row("rev-restricted-0003") + " a")
		p.WaitText("#rv-class", "restricted_publish")
		p.Type("#decision-note", "Looks restricted to me.")
		p.Click("#decide-reject")
		p.WaitText("#decision-result", "Your vote to reject is recorded")
		p.WaitText("#decision-result", "stays in manual review")
		p.WaitText("#review-state", "manual review")
		p.WaitText("#rv-version", "4")
		p.WaitHidden("#decision-form")
		if got := fake.Review("rev-restricted-0003").State; got != "manual_review" {
			t.Errorf("review state %q after one vote", got)
		}
		p.WaitText(row("rev-restricted-0003"), "restricted_publish")
		p.Screenshot("review")
	})

	run("long text is truncated, other types download, purged content says so", func(t *testing.T) {
		p := page.T(t)
		fake.Purge("rev-publish-0002")
		p.Do("open a purged review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/rev-publish-0002'`))
		p.WaitText("#content-msg", "Content purged")
		p.WaitHidden("#content-text")

		png := []byte("\x89PNG\r\n\x1a\n<script>not text</script>")
		fake.SetContent("rev-restricted-0003", "image/png", png)
		p.Do("open a review with an image", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/rev-restricted-0003'`))
		p.WaitText("#content-download", "Download (image/png, 33 bytes)")
		p.WaitHidden("#content-text")
		if href := uitest.Evaluate[string](p, `document.getElementById('content-download').href`); !strings.HasPrefix(href, "blob:") {
			t.Errorf("download link %q, want an object URL", href)
		}
		if name := uitest.Evaluate[string](p, `document.getElementById('content-download').download`); name != "rev-restricted-0003.bin" {
			t.Errorf("download name %q", name)
		}

		long := strings.Repeat("line of submitted text é\n", 4000) // 104,000 bytes: é is two
		fake.SetContent("rev-publish-0002", "text/plain; charset=utf-8", []byte(long))
		p.Do("open a review with long text", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/rev-publish-0002'`))
		p.WaitText("#content-all", "Show all (104,000 bytes; showing the first 64 KiB)")
		if n := uitest.Evaluate[int](p, `new TextEncoder().encode(document.getElementById('content-text').textContent).length`); n > 64*1024 || n < 64*1024-4 {
			t.Errorf("%d bytes shown before Show all, want the first 64 KiB", n)
		}
		p.Click("#content-all")
		p.WaitHidden("#content-all")
		if got := p.Text("#content-text"); got != long {
			t.Errorf("Show all shows %d characters, want %d", len(got), len(long))
		}
		p.Screenshot("content")
	})

	run("the page fits a phone screen", func(t *testing.T) {
		p := page.T(t)
		p.Do("narrow the viewport", chromedp.EmulateViewport(390, 844))
		defer p.Do("restore the viewport", chromedp.ResetViewport())
		p.WaitText(row("rev-restricted-0003"), "restricted_publish")
		if w := uitest.Evaluate[int](p, `document.documentElement.scrollWidth - window.innerWidth`); w > 0 {
			wide := uitest.Evaluate[string](p, `Array.from(document.querySelectorAll('body *'))
				.filter((e) => e.getBoundingClientRect().right > window.innerWidth && !e.closest('[hidden]') && !e.closest('.table-wrap'))
				.slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + e.className + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')`)
			t.Errorf("the page is %d px wider than a 390 px screen: %s", w, wide)
		}
		p.Screenshot("phone")
	})

	run("the SLO dashboard shows the numbers and alerts", func(t *testing.T) {
		p := page.T(t)
		p.Click("#nav-slo")
		p.WaitText("#slo-total", "1,234")
		p.WaitText("#slo-ratio", "87.3%")
		p.WaitText("#slo-ratio-sub", "1,077 of 1,234")
		p.WaitText("#slo-escalated", "41")
		p.WaitText("#slo-conflicts", "3")
		p.WaitText("#slo-p50", "850 ms")
		p.WaitText("#slo-p90", "4.20 s")
		p.WaitText("#slo-p99", "12.8 s")
		p.WaitText("#slo-depth", "2")
		p.WaitText("#slo-oldest", "2 h 1 min")
		p.WaitText("#slo-alerts", "Critical")
		p.WaitText("#slo-alerts", "Only 87.3% of reviews reached an outcome within budget")
		if !p.HasClass("#tile-ratio", "crit") || !p.HasClass("#tile-oldest", "crit") {
			t.Error("low ratio or old queue item not styled critical")
		}
		p.Screenshot("slo-alert")

		p.Do("pick 24h and a class",
			chromedp.SetValue(chromedp.CSS("#slo-window"), "24h"),
			chromedp.SendKeys(chromedp.CSS("#slo-class"), "caption_suggestion"),
			chromedp.Click(chromedp.CSS(`#slo-filter button[type="submit"]`)))
		p.WaitText("#slo-ratio", "99.5%")
		p.WaitText("#slo-total", "28,000")
		if p.HasClass("#tile-ratio", "crit") || p.HasClass("#tile-ratio", "warn") {
			t.Error("a 99.5% ratio is styled as an alert")
		}
		// A periodic refresh may have left while the class was being typed
		// and reach the server after the submitted query, so look for the
		// submitted query among them rather than at the last to arrive.
		clocktest.EventuallyShows(t, "an SLO query with window 24h and class caption_suggestion", func() (bool, string) {
			reqs := fake.RequestsTo(http.MethodGet, "/v1/slo")
			for _, r := range reqs {
				if r.Query.Get("window") == "24h" && r.Query.Get("content_class") == "caption_suggestion" {
					return true, ""
				}
			}
			if len(reqs) == 0 {
				return false, "no SLO query"
			}
			return false, fmt.Sprintf("%d SLO queries, the last %v", len(reqs), reqs[len(reqs)-1].Query)
		})
		// No click: the dashboard refreshes itself.
		fake.SetSLO("24h", newFakeSLO(28001, 27861, 120, 0, 700, 3100, 9900, 1, 60))
		p.WaitText("#slo-total", "28,001")
		p.WaitText("#slo-depth", "1")
		p.WaitHidden("#slo-alerts")
	})

	run("the dashboard charts the window's history", func(t *testing.T) {
		p := page.T(t)
		p.Do("show the last hour of every class",
			chromedp.SetValue(chromedp.CSS("#slo-window"), "1h"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById('slo-class').value = ''`),
			chromedp.Click(chromedp.CSS(`#slo-filter button[type="submit"]`)))
		p.Viewport(1280, 800)
		defer p.Do("restore the viewport", chromedp.ResetViewport())
		p.WaitCharts()
		// The numbers are text: the objective on its line, the dip in the
		// ratio's table, the class's distribution summed up.
		p.WaitText("#chart-ratio", "objective 99.0%")
		p.WaitText("#chart-ratio table.chart-data", "90%")
		p.WaitText("#chart-attempts", "63 attempts: 55 findings, 5 timeouts (7.9%), 3 failures")
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#chart-ratio table.chart-data tbody tr').length`); n != 13 {
			t.Errorf("ratio table has %d rows, want the 13 steps", n)
		}
		if tip := uitest.Evaluate[string](p, `document.querySelectorAll('#chart-ratio .hover rect title')[6].textContent`); !strings.Contains(tip, "Within budget: 90%") {
			t.Errorf("hover text of the seventh step %q", tip)
		}
		if got := uitest.Evaluate[string](p, `document.querySelector('#chart-budget svg').getAttribute('aria-label')`); !strings.Contains(got, "burn rate") {
			t.Errorf("budget chart's accessible name %q", got)
		}
		reqs := fake.RequestsTo(http.MethodGet, "/v1/slo/series")
		if len(reqs) == 0 || reqs[len(reqs)-1].Query.Get("window") != "1h" || reqs[len(reqs)-1].Auth != "Bearer "+moderatorToken {
			t.Errorf("series requests %v", reqs)
		}
		p.Screenshot("slo-charts-1280x800")
		p.Viewport(390, 844)
		p.WaitCharts()
		p.Screenshot("slo-charts-phone")
		// Back to the window and class the next steps read.
		p.Do("show the last 24 hours of caption_suggestion",
			chromedp.SetValue(chromedp.CSS("#slo-window"), "24h"),
			chromedp.SendKeys(chromedp.CSS("#slo-class"), "caption_suggestion"),
			chromedp.Click(chromedp.CSS(`#slo-filter button[type="submit"]`)))
		p.WaitText("#slo-total", "28,001")
	})

	run("a token that stops working returns to sign in", func(t *testing.T) {
		p := page.T(t)
		fake.Revoke(moderatorToken)
		// The view's own refresh (every 5 s) may meet the revoked token
		// first and leave the button hidden: click it from the page, which
		// works either way, rather than wait for it to be visible.
		p.Do("refresh the SLO view", chromedp.Evaluate[chromedp.Void](`document.getElementById('slo-refresh').click()`))
		p.WaitText("#signin-error", "The server did not accept the token")
		p.WaitHidden("#slo-view")
		if uitest.Evaluate[bool](p, `sessionStorage.getItem('reviewledger.token') !== null`) {
			t.Error("the revoked token stayed in sessionStorage")
		}
	})

	run("an auditor is offered no queue, claim or decision", func(t *testing.T) {
		p := page.T(t)
		p.Do("go to the queue", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		queueReads := len(fake.RequestsTo(http.MethodGet, "/v1/manual-queue"))
		p.SignIn(auditorToken)
		p.WaitText("#who", "Signed in as audrey (auditor)")
		// The queue is not the auditor's: the page starts on the dashboard.
		p.WaitText("#slo-total", "28,001")
		p.WaitHidden("#nav-queue")
		// A review waiting for a moderator, as the auditor sees it.
		p.Type("#lookup-id", "rev-publish-0002"+kb.Enter)
		p.WaitText("#review-state", "manual review")
		p.WaitText("#timeline-list", "Escalated")
		p.WaitHidden("#decision-form")
		p.WaitHidden("#review-claim")
		p.WaitHidden("#queue-panel")
		// Auditors read the history, not the content.
		p.WaitHidden("#content")
		for _, r := range fake.RequestsTo(http.MethodGet, "/v1/reviews/rev-publish-0002/content") {
			if r.Auth == "Bearer "+auditorToken {
				t.Error("the auditor's page asked for the submitted content")
			}
		}
		visible := uitest.Evaluate[[]string](p, `Array.from(document.querySelectorAll('button, a, input, select, textarea'))
			.filter((e) => e.offsetParent !== null && /claim|decide|accept|reject|queue/i.test(e.id + ' ' + e.className + ' ' + e.textContent))
			.map((e) => e.outerHTML)`)
		if len(visible) > 0 {
			t.Errorf("an auditor is offered:\n%s", strings.Join(visible, "\n"))
		}
		if n := len(fake.RequestsTo(http.MethodGet, "/v1/manual-queue")); n != queueReads {
			t.Errorf("the auditor's page read the manual queue %d times", n-queueReads)
		}
		p.Screenshot("auditor-pending")
	})

	run("an auditor reads history", func(t *testing.T) {
		p := page.T(t)
		p.Type("#lookup-id", "rev-caption-0001"+kb.Enter)
		p.WaitText("#review-state", "accepted")
		p.WaitHidden("#decision-form")
		p.WaitText("#timeline-list", "ManualDecisionRecorded")
		p.WaitText("#timeline-list", note)
		p.WaitText("#timeline-list", "classification: deadline_exceeded")
		// Eight events to the escalation, the claim, carol's vote and the decision.
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#timeline-list > li').length`); n != 11 {
			t.Errorf("%d timeline entries, want 11", n)
		}
		p.Screenshot("auditor")
		p.Click("#nav-slo")
		p.WaitText("#slo-total", "28,001")
		p.Do("go back", chromedp.NavigateBack())
		p.WaitText("#review-state", "accepted")
		p.Click("#review-close")
		p.WaitHidden("#review-panel")
		p.WaitText("#lookup-hint", "Open a review by its ID")
	})

	run("a submitter is offered only the review lookup", func(t *testing.T) {
		p := page.T(t)
		p.Click("#signout")
		p.WaitText("#signin-error", "You signed out.")
		p.Do("ask for the dashboard", chromedp.Evaluate[chromedp.Void](`location.hash = '#/slo'`))
		sloReads := len(fake.RequestsTo(http.MethodGet, "/v1/slo"))
		p.SignIn(submitterToken)
		p.WaitText("#who", "Signed in as sam (submitter)")
		p.WaitText("#lookup-hint", "Open a review by its ID")
		p.WaitHidden("#nav-queue")
		p.WaitHidden("#nav-slo")
		p.WaitHidden("#slo-view")
		p.WaitHidden("#lookup-hint-slo")
		p.Type("#lookup-id", "rev-publish-0002"+kb.Enter)
		p.WaitText("#review-state", "manual review")
		p.WaitHidden("#decision-form")
		p.WaitHidden("#review-claim")
		p.WaitHidden("#timeline")
		p.WaitHidden("#content")
		if n := len(fake.RequestsTo(http.MethodGet, "/v1/slo")); n != sloReads {
			t.Errorf("the submitter's page read the SLO summary %d times", n-sloReads)
		}
	})

	run("sign out forgets the token", func(t *testing.T) {
		p := page.T(t)
		p.Click("#signout")
		p.WaitText("#signin-error", "You signed out.")
		if uitest.Evaluate[bool](p, `sessionStorage.length !== 0`) {
			t.Error("sessionStorage not cleared")
		}
	})

	run("the token never travels in a URL", func(t *testing.T) {
		for _, r := range fake.Requests() {
			for _, tok := range []string{moderatorToken, auditorToken, submitterToken} {
				if strings.Contains(r.Path+"?"+r.Query.Encode(), tok) {
					t.Errorf("token in URL %s", r.Path)
				}
			}
		}
	})

	uitest.CheckConsoles(t, map[string]*uitest.Page{"the page": page})
}

// newFakeProviders are the figures of three providers over an hour, as
// GET /v1/slo/providers gives them: acme decides caption_suggestion with
// bravo as its shadow, and bravo decides publishing_rule.
func newFakeProviders() []projections.ProviderSLO {
	attempts := func(total, findings, timeouts, failures, within int64, p50, p90, p99 float64) projections.AttemptFigures {
		r := func(n int64) float64 { return float64(n) / float64(total) }
		return projections.AttemptFigures{Total: total, Findings: findings, Timeouts: timeouts, Failures: failures, WithinBudget: within,
			WithinBudgetRatio: r(within), TimeoutRatio: r(timeouts), FailureRatio: r(failures),
			LatencyMS: projections.Percentiles{P50: p50, P90: p90, P99: p99}}
	}
	none := projections.ShadowFigures{Confusion: []projections.ConfusionCell{}}
	cell := func(shadow, decided domain.Decision, n int64) projections.ConfusionCell {
		return projections.ConfusionCell{Shadow: shadow, Decided: decided, Count: n}
	}
	return []projections.ProviderSLO{
		{Provider: "acme", ContentClass: "caption_suggestion", Attempts: attempts(63, 55, 5, 3, 52, 420, 1900, 3800),
			Decided: 55, DecidedWithinBudget: 52, Shadow: none},
		{Provider: "bravo", ContentClass: "caption_suggestion", Shadow: projections.ShadowFigures{
			Observed: 60, Findings: 54, Timeouts: 4, Errors: 2, Missing: 1, WithinBudget: 50,
			WithinBudgetRatio: 50.0 / 60, TimeoutRatio: 4.0 / 60, ErrorRatio: 2.0 / 60,
			Compared: 52, Agreed: 49, AgreementRatio: 49.0 / 52,
			LatencyMS: projections.Percentiles{P50: 610, P90: 2400, P99: 5200},
			Confusion: []projections.ConfusionCell{
				cell(domain.DecisionAccepted, domain.DecisionAccepted, 40), cell(domain.DecisionAccepted, domain.DecisionRejected, 2),
				cell(domain.DecisionRejected, domain.DecisionAccepted, 1), cell(domain.DecisionRejected, domain.DecisionRejected, 9),
			},
		}},
		{Provider: "bravo", ContentClass: "publishing_rule", Attempts: attempts(20, 18, 1, 1, 18, 300, 900, 1500),
			Decided: 18, DecidedWithinBudget: 18, Shadow: none},
	}
}

// card is the CSS selector of the providers view's card of a provider
// and class.
func card(provider, class string) string {
	return `#provider-cards .provider-card[data-provider="` + provider + `"][data-class="` + class + `"]`
}

// TestBrowserProviders reads the SLO dashboard's providers view as an
// auditor: a card per provider and class with its figures as deciding
// provider and as shadow, the lines of each over the window, the empty
// state of a class without figures, and an error of the API.
func TestBrowserProviders(t *testing.T) {
	fake := uitest.NewFakeAPI(time.Now)
	fake.AddToken(auditorToken, "auditor", "audrey")
	fake.SetSLO("1h", newFakeSLO(1234, 1230, 4, 0, 850, 4200, 12800, 0, 0))
	fake.SetSLO("24h", newFakeSLO(28000, 27860, 120, 0, 700, 3100, 9900, 0, 0))
	fake.SetProviders(newFakeProviders())
	srv := httptest.NewServer(serveFake(fake))
	t.Cleanup(srv.Close)

	page := uitest.Start(t, srv.URL)
	run := uitest.InOrder(t)

	run("a card per provider and class, side by side", func(t *testing.T) {
		p := page.T(t)
		p.Viewport(1280, 800)
		p.Open("/#/slo")
		p.SignIn(auditorToken)
		p.WaitText("#slo-total", "1,234")
		p.WaitFor("three provider cards", `() => document.querySelectorAll('#provider-cards .provider-card').length === 3`)
		p.WaitHidden("#slo-providers-empty")
		p.WaitHidden("#slo-providers-error")
		got := uitest.Evaluate[[]string](p, `[...document.querySelectorAll('#provider-cards .provider-card')].map((c) => c.dataset.provider + ' ' + c.dataset.class)`)
		if want := []string{"acme caption_suggestion", "bravo caption_suggestion", "bravo publishing_rule"}; strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("cards %q, want %q", got, want)
		}
		if uitest.Evaluate[bool](p, `(() => { const c = document.querySelectorAll('#provider-cards .provider-card'); return c[0].getBoundingClientRect().top !== c[1].getBoundingClientRect().top; })()`) {
			t.Error("the first two cards are not side by side at 1280 px")
		}
		reqs := fake.RequestsTo(http.MethodGet, "/v1/slo/providers")
		if len(reqs) == 0 || reqs[len(reqs)-1].Query.Get("window") != "1h" || reqs[len(reqs)-1].Auth != "Bearer "+auditorToken {
			t.Errorf("provider requests %v", reqs)
		}
		if n := len(fake.RequestsTo(http.MethodGet, "/v1/slo/providers/series")); n == 0 {
			t.Error("the page never read /v1/slo/providers/series")
		}
		if u := p.Unlabelled(); len(u) > 0 {
			t.Errorf("controls without a name:\n%s", strings.Join(u, "\n"))
		}
	})

	run("a deciding provider's card", func(t *testing.T) {
		p := page.T(t)
		c := card("acme", "caption_suggestion")
		p.WaitText(c+" .provider-name", "acme")
		p.WaitText(c+" .provider-class", "caption_suggestion")
		if got := p.Text(c + " .role-hints"); got != "deciding" {
			t.Errorf("role hints %q, want deciding only", got)
		}
		for fig, want := range map[string]string{
			"attempts":          "6355 findings · 5 timeouts · 3 failures",
			"within-budget":     "Within budget82.5%52 of 63 attempts",
			"timeouts-failures": "7.9% / 4.8%",
			"latency":           "p50 420 ms · p99 3.80 s",
			"decided":           "5552 within budget",
		} {
			if got := p.Text(c + ` [data-figure="` + fig + `"]`); !strings.Contains(got, want) {
				t.Errorf("%s %q, want %q", fig, got, want)
			}
		}
		if !p.HasClass(c+` [data-figure="within-budget"] .figure-value`, "crit") {
			t.Error("82.5% within budget is not marked critical")
		}
		p.WaitText(c+` [data-figure="within-budget"] .figure-flag`, "Critical: below 95%")
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#provider-cards .figure-flag').length`); n != 3 {
			t.Errorf("%d figures flagged, want 3 (acme's 82.5%%, bravo's 83.3%% as shadow and 90.0%% on publishing_rule)", n)
		}
		if uitest.Evaluate[bool](p, `document.querySelector(`+jsQuote(c)+`).querySelector('.provider-role.shadow, table.confusion') !== null`) {
			t.Error("a provider that was never a shadow shows shadow figures")
		}
		p.WaitText(card("bravo", "publishing_rule")+` [data-figure="within-budget"]`, "90.0%18 of 20 attempts")
	})

	run("a shadow provider's card with its confusion matrix", func(t *testing.T) {
		p := page.T(t)
		c := card("bravo", "caption_suggestion")
		if got := p.Text(c + " .role-hints"); got != "shadow" {
			t.Errorf("role hints %q, want shadow only", got)
		}
		for fig, want := range map[string]string{
			"observed":             "6054 findings · 4 timeouts · 2 errors",
			"agreement":            "Agreement94.2%49 of 52 compared",
			"shadow-within-budget": "83.3%50 of 60 observed",
			"timeouts-errors":      "6.7% / 3.3%",
			"missing":              "Missing1",
			"shadow-latency":       "5.20 sp50 610 ms",
		} {
			if got := p.Text(c + ` [data-figure="` + fig + `"]`); !strings.Contains(got, want) {
				t.Errorf("%s %q, want %q", fig, got, want)
			}
		}
		cells := uitest.Evaluate[map[string]string](p, `Object.fromEntries([...document.querySelectorAll(`+jsQuote(c+" table.confusion td")+`)]
			.map((td) => [td.dataset.shadow + '/' + td.dataset.decided, td.textContent]))`)
		want := map[string]string{"accepted/accepted": "40", "accepted/rejected": "2", "rejected/accepted": "1", "rejected/rejected": "9"}
		for k, v := range want {
			if cells[k] != v {
				t.Errorf("confusion %s = %q, want %q (all: %v)", k, cells[k], v, cells)
			}
		}
		if len(cells) != len(want) {
			t.Errorf("confusion cells %v, want %v", cells, want)
		}
		if got := p.Text(c + " table.confusion caption"); !strings.Contains(got, "bravo") {
			t.Errorf("confusion caption %q", got)
		}
		if got := uitest.Evaluate[string](p, `[...document.querySelectorAll(`+jsQuote(c+" table.confusion tbody th")+`)].map((th) => th.textContent).join(',')`); got != "accepted,rejected" {
			t.Errorf("confusion rows %q", got)
		}
		p.Screenshot("slo-providers-1280x800")
	})

	run("a line per provider over the window, with gaps", func(t *testing.T) {
		p := page.T(t)
		budget := map[string]int{
			"acme · caption_suggestion":           12, // no attempt in step 3
			"bravo · caption_suggestion (shadow)": 12, // nothing observed in step 9
			"bravo · publishing_rule":             12, // no attempt in step 5
		}
		p.WaitFor("the within-budget chart's lines", `() => document.querySelectorAll('#chart-provider-budget path.line').length === 3`)
		for series, points := range budget {
			line := `#chart-provider-budget path.line[data-series=` + jsQuote(series) + `]`
			if got := uitest.Evaluate[int](p, `Number(document.querySelector(`+jsQuote(line)+`).dataset.points)`); got != points {
				t.Errorf("%s has %d points, want %d", series, got, points)
			}
			if d := uitest.Evaluate[string](p, `document.querySelector(`+jsQuote(line)+`).getAttribute('d')`); strings.Count(d, "M") != 2 {
				t.Errorf("%s is drawn as %q, want two runs around its gap", series, d)
			}
		}
		if !p.HasClass(`#chart-provider-budget path.line[data-series="bravo · caption_suggestion (shadow)"]`, "s-shadow") {
			t.Error("the shadow's within-budget line is not dashed")
		}
		agreement := uitest.Evaluate[[]string](p, `[...document.querySelectorAll('#chart-provider-agreement path.line')].map((l) => l.dataset.series + ' ' + l.dataset.points)`)
		if len(agreement) != 1 || agreement[0] != "bravo · caption_suggestion 11" {
			t.Errorf("agreement lines %q, want bravo's with 11 points (none in steps 9 and 10)", agreement)
		}
		p.WaitHidden("#chart-provider-agreement-empty")
		rows := uitest.Evaluate[[]string](p, `[...document.querySelectorAll('#chart-provider-agreement table.chart-data tbody tr')].map((tr) => tr.cells[1].textContent)`)
		if len(rows) != 13 || rows[0] != "100%" || rows[5] != "75%" || rows[9] != "no data" || rows[10] != "no data" {
			t.Errorf("agreement per step %q", rows)
		}
		if tip := uitest.Evaluate[string](p, `document.querySelectorAll('#chart-provider-budget .hover rect title')[3].textContent`); !strings.Contains(tip, "acme · caption_suggestion: no data") {
			t.Errorf("hover text of the fourth step %q", tip)
		}
		if got := uitest.Evaluate[string](p, `document.querySelector('#chart-provider-agreement svg').getAttribute('aria-label')`); !strings.Contains(got, "agreed") {
			t.Errorf("agreement chart's accessible name %q", got)
		}
		// A card and its lines share a colour.
		if !p.HasClass(card("bravo", "publishing_rule")+" .provider-name .swatch", "s-prov-2") ||
			!p.HasClass(`#chart-provider-budget path.line[data-series="bravo · publishing_rule"]`, "s-prov-2") {
			t.Error("bravo · publishing_rule's card and line differ in colour")
		}
	})

	run("the view fits a phone screen", func(t *testing.T) {
		p := page.T(t)
		p.Viewport(390, 844)
		p.WaitFor("the charts drawn for the phone's width", `() => [...document.querySelectorAll('#slo-providers svg.chart-svg')].every((s) =>
			Math.abs(Number(s.getAttribute('width')) - Math.max(240, s.parentElement.clientWidth)) <= 1)`)
		if over, wide := p.Overflow(); over > 0 {
			t.Errorf("the page is %d px wider than a 390 px screen: %s", over, wide)
		}
		p.Screenshot("slo-providers-phone")
		p.Viewport(1280, 800)
	})

	run("a class without provider figures shows the empty state", func(t *testing.T) {
		p := page.T(t)
		p.Do("pick a class no provider served",
			chromedp.SendKeys(chromedp.CSS("#slo-class"), "restricted_publish"),
			chromedp.Click(chromedp.CSS(`#slo-filter button[type="submit"]`)))
		p.WaitText("#slo-providers-empty", "No provider figures in this window")
		p.WaitHidden("#provider-cards")
		p.WaitHidden("#provider-charts")
		p.WaitHidden("#slo-providers-error")
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#provider-cards .provider-card').length`); n != 0 {
			t.Errorf("%d cards left in the empty state", n)
		}
		asked := false
		for _, r := range fake.RequestsTo(http.MethodGet, "/v1/slo/providers/series") {
			asked = asked || r.Query.Get("content_class") == "restricted_publish"
		}
		if !asked {
			t.Error("the series was not asked for the class")
		}
		p.Screenshot("slo-providers-empty")
	})

	run("an error of the API shows as the dashboard's errors do", func(t *testing.T) {
		p := page.T(t)
		fake.SetProvidersDown(true)
		p.Do("show every class", chromedp.Evaluate[chromedp.Void](`document.getElementById('slo-class').value = ''`))
		p.Click("#slo-refresh")
		p.WaitText("#slo-providers-error", "The provider figures could not be loaded.")
		p.WaitText("#slo-providers-error", "Not ready")
		p.WaitText("#slo-providers-error", "HTTP 503")
		p.WaitText("#slo-providers-error", "Request ID: req-")
		if role := uitest.Evaluate[string](p, `document.getElementById('slo-providers-error').getAttribute('role')`); role != "alert" {
			t.Errorf("error box role %q", role)
		}
		// The rest of the dashboard is unaffected.
		p.WaitHidden("#slo-error")
		p.WaitText("#slo-total", "1,234")
		fake.SetProvidersDown(false)
		// No click: the dashboard refreshes itself, and the error goes.
		p.WaitHidden("#slo-providers-error")
		p.WaitFor("three provider cards", `() => document.querySelectorAll('#provider-cards .provider-card').length === 3`)
	})

	uitest.CheckConsoles(t, map[string]*uitest.Page{"the page": page})
}

func jsQuote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
