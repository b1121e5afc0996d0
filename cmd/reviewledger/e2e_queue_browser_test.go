package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
)

// queueBrowserPolicy is the policy of the queue's browser test: an
// outage class, a class whose decisions need a claim, and one with a
// short SLA, so colours change within the test.
const queueBrowserPolicy = `classes:
  e2e_outage:          # two 503s exhaust the round
    budget: 4s
    attempt_timeout: 1s
    max_attempts: 2
    backoff: {initial: 50ms, max: 100ms, jitter: 10ms}
    on_exhaustion: manual_review
    priority: 1
  e2e_claimed:         # only the holder of a live claim may decide
    budget: 4s
    attempt_timeout: 1s
    max_attempts: 2
    backoff: {initial: 50ms, max: 100ms, jitter: 10ms}
    on_exhaustion: manual_review
    claims: required
    priority: 2
  e2e_sla:             # a moderator has 20 seconds
    budget: 4s
    attempt_timeout: 1s
    max_attempts: 2
    backoff: {initial: 50ms, max: 100ms, jitter: 10ms}
    on_exhaustion: manual_review
    manual_sla: 20s
    priority: 3
`

// TestE2EQueueBrowser: moderators work the manual queue in headless
// Chromium against the real server (its own, for a policy of its own): a
// provider outage sends 50 reviews to the queue and a bulk requeue sends
// them back, leaving the page live as the recovered provider decides them;
// a class that requires a claim refuses a decision without one; a second
// browser sees the claim live; the keyboard alone claims and decides; the
// SLA colour changes as time passes. Skipped only when Chromium is missing
// and CI is unset.
func TestE2EQueueBrowser(t *testing.T) {
	t.Parallel()
	uitest.Chromium(t)
	policy := filepath.Join(t.TempDir(), "queue-policy.yaml")
	if err := os.WriteFile(policy, []byte(queueBrowserPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := newE2EServer(t, map[string]string{"REVIEWLEDGER_POLICY": policy})

	// The outage: every attempt of the first round answers 503; the
	// provider is back for the second.
	const outage = 50
	ids := make([]string, outage)
	for i := range ids {
		ids[i] = fmt.Sprintf("e2e-outage-%04d", i)
		srv.Provider.script(ids[i], status(http.StatusServiceUnavailable, ""), status(http.StatusServiceUnavailable, ""), accept())
		srv.submit(t, ids[i], "e2e_outage", content(ids[i]))
	}
	for _, id := range ids {
		if got := srv.waitSettled(t, id); got.State != "manual_review" {
			t.Fatalf("%s: %+v, want manual_review after the outage", id, got)
		}
	}
	srv.waitQueued(t, ids[outage-1], "e2e_outage")

	// Two reviews with an SLA, for the queue's screenshot: time left, green.
	for _, id := range []string{"e2e-sla-early-1", "e2e-sla-early-2"} {
		srv.Provider.script(id, status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_sla", content(id))
	}
	srv.waitQueued(t, "e2e-sla-early-2", "e2e_sla")

	uma := uitest.Start(t, srv.URL)
	mona := uitest.Start(t, srv.URL)
	run := uitest.InOrder(t) // each step builds on the ones before it

	run("a bulk requeue empties the queue live as the provider decides", func(t *testing.T) {
		p := uma.T(t)
		p.Viewport(1280, 800)
		p.Open("/")
		p.SignIn(tokModeratorUI)
		p.WaitText("#who", "Signed in as uma")
		p.WaitLive("live")
		p.WaitText(uitest.Row(ids[0]), "e2e_outage")
		p.WaitText(uitest.Row("e2e-sla-early-1"), "s left")
		p.ScreenshotView("e2e-queue-1280x800")
		// Only the outage's class, to requeue all of it.
		p.Type("#queue-class", "e2e_outage"+kb.Enter)
		p.WaitText("#queue-count", fmt.Sprintf("%d reviews waiting", outage))
		p.WaitText("#bulk-requeue-filter", "Requeue all of e2e_outage…")
		p.Do("mark the page", chromedp.Evaluate[chromedp.Void](`window.__notReloaded = true`))
		p.Click("#bulk-requeue-filter")
		p.WaitText("#confirm-count", fmt.Sprintf("This sends %d reviews (class e2e_outage) back to automated review", outage))
		p.Type("#confirm-note", "Provider recovered.")
		p.ScreenshotView("e2e-bulk-confirm-1280x800")
		before := uitest.Evaluate[string](p, `document.getElementById('live-status').dataset.events || '0'`)
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", fmt.Sprintf("Done: %d requeued.", outage))
		p.Click("#confirm-cancel")
		p.WaitText("#queue-empty", "Nothing is waiting")
		if !uitest.Evaluate[bool](p, `window.__notReloaded === true`) {
			t.Error("the page was reloaded")
		}
		// The page drops what the bulk answer says was requeued at once; the
		// stream's changes come from the global order, which a busy
		// database server (any transaction open on it) can hold back a
		// moment longer: they must arrive, after or before the queue empties.
		p.WaitFor("a change on the stream as the reviews left",
			`(before) => (document.getElementById('live-status').dataset.events || '0') !== before`, before)
		for _, id := range ids {
			if got := srv.waitSettled(t, id); got.State != "accepted" {
				t.Errorf("%s: %+v, want accepted by the recovered provider", id, got)
			}
		}
		evs := srv.events(t, ids[0])
		var requeued *eventView
		for i := range evs {
			if evs[i].Type == "Requeued" {
				requeued = &evs[i]
			}
		}
		if requeued == nil || requeued.field("by") != "uma" || requeued.field("note") != "Provider recovered." {
			t.Errorf("events of %s: %+v, want a Requeued by uma with the note", ids[0], evs)
		}
	})

	run("the review panel shows the rounds of a requeued review", func(t *testing.T) {
		p := uma.T(t)
		p.Do("open a requeued review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/`+ids[0]+`'`))
		p.WaitText("#review-state", "accepted")
		p.WaitText("#why-escalation", "attempts exhausted")
		p.WaitText("#why-escalation", "in round 1")
		p.WaitText("#why-attempts-body", "provider unavailable")
		p.WaitText("#why-attempts-body", "Round 2, requeued by uma")
		p.WaitText(`#why-attempts-body tr.attempt[data-round="2"]`, "finding: accepted")
		p.WaitText("#why-requeues", "requeued by uma: Provider recovered.")
		p.ScreenshotView("e2e-review-timeline-1280x800")
		p.Press(kb.Escape)
		p.WaitHidden("#review-panel")
		p.Do("clear the filter", chromedp.Evaluate[chromedp.Void](`document.getElementById('queue-class').value = ''`),
			chromedp.Click(chromedp.CSS(`#queue-filter button[type="submit"]`)))
		// The whole queue is read again: wait for it, so that the next step's
		// review is not added live and then dropped by this older read.
		p.WaitText(uitest.Row("e2e-sla-early-1"), "e2e_sla")
	})

	const claimed, keyed = "e2e-claimed-0001", "e2e-claimed-0002"
	for _, id := range []string{claimed, keyed} {
		srv.Provider.script(id, status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_claimed", content(id))
		srv.waitQueued(t, id, "e2e_claimed")
	}

	run("a class that requires a claim refuses a decision without one, and a second browser sees the claim", func(t *testing.T) {
		p := uma.T(t)
		m := mona.T(t)
		m.Open("/")
		m.SignIn(tokModerator)
		m.WaitLive("live")
		m.WaitText(uitest.Row(claimed)+" td.claim-cell", "Unclaimed")

		p.WaitText(uitest.Row(claimed), "provider refused")
		p.Click(uitest.Row(claimed) + " a")
		p.WaitText("#decision-claim-note", "This class needs a claim to decide")
		p.Type("#decision-note", "Checked; fine.")
		p.Click("#decide-accept")
		p.WaitText("#decision-error", "This class needs a claim before a decision")
		if got := srv.review(t, claimed); got.State != "manual_review" {
			t.Fatalf("%+v after a decision without the claim", got)
		}
		p.Click("#decision-claim")
		p.WaitText("#rv-claim", "Claimed by you")
		// The claim's action is over when its refusal is taken away and
		// the note has the focus (which may scroll the panel): only then
		// is the page still under the next click. The live queue can show
		// the claim before that.
		p.WaitHidden("#decision-error")
		if got := p.Focused(); got != "decision-note" {
			t.Errorf("focus on %q after claiming, want the note", got)
		}
		// The other moderator's page shows the claim without a reload.
		m.WaitText(uitest.Row(claimed)+" td.claim-cell", "Claimed by uma until")
		p.Click("#decide-accept")
		p.WaitText("#decision-result", "Decision recorded: accepted")
		m.WaitGone(uitest.Row(claimed))
		if got := srv.review(t, claimed); got.State != "accepted" {
			t.Errorf("%+v after the decision with the claim", got)
		}
		p.Press(kb.Escape)
		p.WaitHidden("#review-panel")
	})

	run("the keyboard alone claims and decides", func(t *testing.T) {
		p := uma.T(t)
		p.Do("start from the queue's heading", chromedp.Focus(chromedp.CSS("#queue-title")))
		p.Press("?")
		p.WaitFor("the help overlay", `() => document.getElementById('help-dialog').open`)
		p.ScreenshotView("e2e-help-1280x800")
		p.Press(kb.Escape)
		p.WaitFor("the help overlay to close", `() => !document.getElementById('help-dialog').open && document.activeElement.id === 'help-open'`)
		p.Press("/")
		p.WaitFor("the class filter to have focus", `() => document.activeElement.id === 'queue-class'`)
		p.Press("e2e_claimed" + kb.Enter)
		p.WaitText("#queue-count", "1 review waiting")
		p.Press(kb.Escape, "j")
		p.WaitFor("the cursor on the review", `(id) => document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.reviewId === id`, keyed)
		p.Press(kb.Enter)
		p.WaitText("#review-id", keyed)
		p.WaitText("#review-state", "manual review")
		p.Press("c")
		p.WaitText("#rv-claim", "Claimed by you")
		p.Press("r")
		p.WaitFor("the note to have focus", `() => document.activeElement.id === 'decision-note'`)
		p.Press("Rejected from the keyboard.")
		p.PressCtrl(kb.Enter)
		p.WaitText("#decision-result", "Decision recorded: rejected")
		got := srv.review(t, keyed)
		last := srv.events(t, keyed)
		if got.State != "rejected" || last[len(last)-1].field("note") != "Rejected from the keyboard." || last[len(last)-1].field("moderator") != "uma" {
			t.Errorf("%+v, last event %+v", got, last[len(last)-1])
		}
		p.Press(kb.Escape)
		p.Do("clear the filter", chromedp.Evaluate[chromedp.Void](`document.getElementById('queue-class').value = ''`),
			chromedp.Click(chromedp.CSS(`#queue-filter button[type="submit"]`)))
		// The whole queue is read again: wait for it, so that the next step's
		// review is not added live and then dropped by this older read.
		p.WaitText(uitest.Row("e2e-sla-early-1"), "e2e_sla")
	})

	run("the SLA colour changes as time passes", func(t *testing.T) {
		p := uma.T(t)
		const id = "e2e-sla-0001"
		srv.Provider.script(id, status(http.StatusBadRequest, ""))
		srv.submit(t, id, "e2e_sla", content(id))
		sel := uitest.Row(id) + " .sla-left"
		// 20 s to decide: green, amber for the last 5 s, then red.
		p.WaitFor("green", `(sel) => { const e = document.querySelector(sel); return !!e && e.dataset.level === 'ok'; }`, sel)
		p.WaitText(sel, "s left")
		p.WaitFor("amber", `(sel) => { const e = document.querySelector(sel); return !!e && e.dataset.level === 'warn'; }`, sel)
		p.WaitText(sel, "Due soon")
		p.WaitFor("red", `(sel) => { const e = document.querySelector(sel); return !!e && e.dataset.level === 'crit'; }`, sel)
		p.WaitText(sel, "Overdue by")
		if colour := uitest.Evaluate[string](p, `getComputedStyle(document.querySelector('`+sel+`')).color`); colour != "rgb(180, 35, 24)" {
			t.Errorf("overdue colour %s, want the critical red", colour)
		}
	})

	run("screens at a phone's width", func(t *testing.T) {
		p := uma.T(t)
		p.Viewport(390, 844)
		p.WaitText(uitest.Row("e2e-sla-0001"), "Overdue")
		if over, wide := p.Overflow(); over > 0 {
			t.Errorf("the queue is %d px wider than a phone: %s", over, wide)
		}
		p.ScreenshotView("e2e-queue-phone")
		p.Do("open a requeued review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/`+ids[1]+`'`))
		p.WaitText("#why-attempts-body", "Round 2")
		p.Do("scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.getElementById('why').scrollIntoView()`))
		p.ScreenshotView("e2e-review-timeline-phone")
		p.Click("#help-open")
		p.WaitFor("the help overlay", `() => document.getElementById('help-dialog').open`)
		p.ScreenshotView("e2e-help-phone")
		p.Click("#help-close")
		p.Do("back to the queue", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		p.Click("#bulk-requeue-filter")
		p.WaitText("#confirm-count", "This sends 3 reviews (every reason and class) back")
		p.ScreenshotView("e2e-bulk-confirm-phone")
		p.Click("#confirm-cancel")
	})

	uitest.CheckConsoles(t, map[string]*uitest.Page{"uma": uma, "mona": mona})
}
