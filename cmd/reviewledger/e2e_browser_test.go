package main

import (
	"net/http"
	"testing"

	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
)

// testBrowser: a moderator works an escalated review in the UI served by
// the real server, in headless Chromium (package uitest). Skipped only
// when Chromium is missing and CI is unset.
func testBrowser(t *testing.T, srv *e2eServer) {
	uitest.Chromium(t)
	// A workload for the dashboard's charts: accepted at once, accepted
	// after a timed-out attempt (a timeout, a backoff, a finding), and
	// rejected after a 503.
	for id, steps := range map[string][]step{
		"e2e-charts-ok": {accept()}, "e2e-charts-retry": {hang(), accept()}, "e2e-charts-503": {status(http.StatusServiceUnavailable, ""), finding("rejected", "r")},
	} {
		srv.Provider.script(id, steps...)
		srv.submit(t, id, "e2e_fast", content(id))
	}
	const id = "e2e-browser-0001"
	srv.Provider.script(id, status(http.StatusBadRequest, ""))
	srv.submit(t, id, "e2e_fast", content("for the browser"))
	if got := srv.waitSettled(t, id); got.State != "manual_review" {
		t.Fatalf("review %+v, want manual_review", got)
	}
	srv.waitQueued(t, id, "e2e_fast")

	page := uitest.Start(t, srv.URL)
	page.Open("/")
	page.SignIn(tokModeratorUI)
	page.WaitText(uitest.Row(id), "e2e_fast")
	page.WaitText(uitest.Row(id), "provider refused")

	page.Click(uitest.Row(id) + " button.claim")
	page.WaitText("#queue-notice", "You claimed "+id+" until")
	page.WaitText("#who", "Signed in as uma")

	page.Click(uitest.Row(id) + " a")
	page.WaitText("#review-state", "manual review")
	const note = "Checked in the browser; fine."
	page.Type("#decision-note", note)
	page.Click("#decide-accept")
	page.WaitText("#decision-result", "Decision recorded: accepted")
	page.WaitText("#review-state", "accepted")
	page.WaitGone(uitest.Row(id))

	got := srv.review(t, id)
	if got.State != "accepted" || got.DecidedAt == nil {
		t.Errorf("review %+v after the browser's decision", got)
	}
	evs := srv.events(t, id)
	last := evs[len(evs)-1]
	if last.Type != "ManualDecisionRecorded" || last.field("moderator") != "uma" || last.field("note") != note {
		t.Errorf("last event %s %s", last.Type, last.Data)
	}
	srv.waitUnqueued(t, id, "e2e_fast")

	// An auditor reads the same review's history, rendered from the real
	// events, and the SLO dashboard from the real read models.
	page.Click("#signout")
	page.WaitText("#signin-error", "You signed out.")
	page.SignIn(tokAuditor)
	page.Type("#lookup-id", id+kb.Enter)
	page.WaitText("#review-state", "accepted")
	page.WaitHidden("#decision-form")
	for _, want := range []string{"Submitted", "AttemptStarted", "AttemptTimedOut", "Escalated", "ManualDecisionRecorded", note} {
		page.WaitText("#timeline-list", want)
	}
	if n := uitest.Evaluate[int](page, `document.querySelectorAll('#timeline-list > li').length`); n != len(evs) {
		t.Errorf("%d timeline entries, want %d", n, len(evs))
	}
	page.Click("#nav-slo")
	page.WaitFor("the SLO dashboard to show a total", `() => /^[1-9][0-9,]*$/.test(document.getElementById('slo-total').textContent.trim())`)

	// The charts, drawn from the real read models (this server's reviews,
	// this one's and the other scenarios'), at a laptop's and a phone's
	// width: each has data, the numbers as text, the page no wider than
	// the screen.
	for _, id := range []string{"e2e-charts-ok", "e2e-charts-retry", "e2e-charts-503"} {
		if got := srv.waitSettled(t, id); got.State != "accepted" && got.State != "rejected" {
			t.Fatalf("%s: %+v", id, got)
		}
	}
	page.Viewport(1280, 800)
	page.WaitCharts()
	page.WaitText("#chart-attempts", "e2e_fast")
	page.WaitFor("the timed-out attempt in the distribution", `() => [...document.querySelectorAll('#chart-attempts [data-class="e2e_fast"] table.chart-data tbody tr')].some((tr) => tr.cells[2] && Number(tr.cells[2].textContent) > 0)`)
	page.WaitFor("a step with reviews in the ratio's table", `() => [...document.querySelectorAll('#chart-ratio table.chart-data td')].some((td) => /%$/.test(td.textContent))`)
	// The providers view, from GET /v1/slo/providers and its series: the
	// provider that decided e2e_fast has a card with its attempts and a
	// line of its within-budget ratio.
	page.WaitFor("a deciding provider's card for e2e_fast", `() => [...document.querySelectorAll('#provider-cards .provider-card[data-class="e2e_fast"]')].some((c) =>
		c.querySelector('.role-hint.deciding') && Number(c.querySelector('[data-figure="attempts"] .figure-value').textContent.replace(/,/g, '')) > 0)`)
	page.WaitFor("a provider's within-budget line for e2e_fast", `() => [...document.querySelectorAll('#chart-provider-budget path.line')].some((l) =>
		l.dataset.series.endsWith(' · e2e_fast') && Number(l.dataset.points) > 0)`)
	page.WaitHidden("#slo-providers-error")
	page.Screenshot("e2e-slo-charts-1280x800")
	page.Viewport(390, 844)
	page.WaitCharts()
	page.Screenshot("e2e-slo-charts-phone")

	uitest.CheckConsoles(t, map[string]*uitest.Page{"the page": page})
}
