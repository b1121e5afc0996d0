package ui

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/api/ui/uitest"
	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

const bobToken = "moderator-token-bob-00001"

// TestBrowserQueueTeamwork walks moderators through the queue as a team
// works it, against uitest.FakeAPI: live updates and their fallback to polling,
// the keyboard alone, the review's timeline, a class that requires a
// claim, holds, bulk requeue and release with a dry-run count and
// per-item outcomes, and SLA colours as the page's clock moves on.
func TestBrowserQueueTeamwork(t *testing.T) {
	// The fake's clock moves with the page's (uitest.AdvanceClock), for the
	// SLA colours.
	var skew atomic.Int64
	fake := uitest.NewFakeAPI(func() time.Time { return time.Now().Add(time.Duration(skew.Load())) })
	advance := func(p *uitest.Page, d time.Duration) {
		skew.Add(int64(d))
		p.AdvanceClock(d)
	}
	fake.AddToken(moderatorToken, "moderator", "alice")
	fake.AddToken(bobToken, "moderator", "bob")
	fake.AddToken(auditorToken, "auditor", "audrey")
	now := time.Now()
	// The SLA item first, so the keyboard starts on it.
	fake.Escalate("rev-sla-0001", "caption_suggestion", "attempts_exhausted", 2, 10*time.Minute, 1, nil)
	fake.SetDue("rev-sla-0001", now.Add(20*time.Minute)) // a 30 min SLA, 20 min left: green
	fake.Escalate("rev-kbd-0002", "caption_suggestion", "provider_refused", 1, 5*time.Minute, 1, []string{"provider refused: 400"})
	fake.Escalate("rev-claim-0003", "restricted_publish", "human_gate", 0, 3*time.Minute, 1, nil)
	fake.RequireClaims("rev-claim-0003")
	fake.Escalate("rev-hold-0004", "caption_suggestion", "attempts_exhausted", 3, 2*time.Minute, 1, nil)
	// A review that was requeued once and came back: its timeline has two
	// rounds.
	fake.Escalate("rev-round-0005", "caption_suggestion", "budget_exhausted", 2, 30*time.Minute, 1, nil)
	fake.RequeueAs("rev-round-0005", "carol", "provider back after the outage")
	fake.EscalateAgain("rev-round-0005", "provider_unavailable", "provider_unavailable", 2)
	// An outage: 120 reviews out of budget, more than one page of a bulk
	// requeue.
	for i := range 120 {
		fake.Escalate(fmt.Sprintf("rev-outage-%04d", i), "caption_suggestion", "budget_exhausted", 3, time.Minute, 1, nil)
	}
	srv := httptest.NewServer(serveFake(fake))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { fake.RefuseStreams(true) }) // ends open streams before srv.Close waits for them

	alice := uitest.Start(t, srv.URL)
	run := uitest.InOrder(t) // each step builds on the ones before it

	run("the queue is live, with SLA and shortcut hints", func(t *testing.T) {
		p := alice.T(t)
		p.Viewport(1280, 800)
		p.Open("/")
		p.SignIn(moderatorToken)
		p.WaitText("#who", "Signed in as alice (moderator)")
		p.WaitLive("live")
		p.WaitText("#live-status", "Live")
		p.WaitText(row("rev-sla-0001")+" td.sla", " left")
		// The first 100 of 125, as the limit says.
		p.WaitText("#queue-count", "100 reviews waiting")
		if lvl := uitest.Evaluate[string](p, `document.querySelector('`+row("rev-sla-0001")+` .sla-left').dataset.level`); lvl != "ok" {
			t.Errorf("SLA level %q with two thirds of the SLA left, want ok", lvl)
		}
		p.WaitText("#queue-keys", "j")
		p.WaitText("#help-open", "Shortcuts")
		streams := fake.RequestsTo(http.MethodGet, "/v1/manual-queue/events")
		if len(streams) == 0 || streams[0].Auth != "Bearer "+moderatorToken {
			t.Fatalf("stream requests %+v, want one with the bearer token", streams)
		}
		for _, r := range fake.RequestsTo(http.MethodGet, "/v1/manual-queue") {
			if r.Query.Get("held") != "any" {
				t.Errorf("queue read %v without held=any", r.Query)
			}
		}
		if got := p.Unlabelled(); len(got) > 0 {
			t.Errorf("controls without a name:\n%s", strings.Join(got, "\n"))
		}
		p.ScreenshotView("queue-1280x800")
	})

	run("the keyboard alone opens, claims and rejects with a note", func(t *testing.T) {
		p := alice.T(t)
		p.Do("start from the page", chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`))
		p.Press("j")
		p.WaitFor("the cursor on the first row", `() => document.activeElement && document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.reviewId === 'rev-sla-0001'`)
		if !p.HasClass(row("rev-sla-0001"), "cursor") {
			t.Error("the first row is not marked as the cursor")
		}
		p.Press("j", "j", "k")
		p.WaitFor("the cursor on the second row", `() => document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.reviewId === 'rev-kbd-0002'`)
		p.Press(kb.ArrowDown, kb.ArrowUp)
		p.WaitFor("arrows to move the cursor too", `() => document.activeElement.closest('tr') && document.activeElement.closest('tr').dataset.reviewId === 'rev-kbd-0002'`)
		p.Press(kb.Enter)
		p.WaitText("#review-id", "rev-kbd-0002")
		p.WaitText("#review-state", "manual review")
		if got := p.Focused(); got != "review-title" {
			t.Errorf("focus on %q after opening, want the review's heading", got)
		}
		// Why it is here, beside the decision.
		p.WaitText("#why-escalation", "provider refused")
		p.WaitText("#why-attempts-body", "deadline exceeded")
		p.WaitText("#why-attempts-body", "4.00 s")
		p.Press("c")
		p.WaitText("#queue-notice", "You claimed rev-kbd-0002 until")
		p.WaitText("#rv-claim", "Claimed by you")
		p.Press("r")
		p.WaitFor("the note to have focus", `() => document.activeElement.id === 'decision-note'`)
		p.WaitText("#decision-keys", "Rejecting")
		if v := uitest.Evaluate[string](p, `document.getElementById('decision-note').value`); v != "" {
			t.Errorf("pressing r typed %q into the note", v)
		}
		const note = "Refused by the provider and by me: spam."
		p.Press(note)
		p.PressCtrl(kb.Enter)
		p.WaitText("#decision-result", "Decision recorded: rejected")
		p.WaitGone(row("rev-kbd-0002"))
		ev := fake.LastEvent("rev-kbd-0002")
		if ev.Type != "ManualDecisionRecorded" || ev.Data["state"] != "rejected" || ev.Data["note"] != note || ev.Data["moderator"] != "alice" {
			t.Errorf("last event %+v", ev)
		}
		// The cursor moved on to the row that took the decided one's place.
		if c := uitest.Evaluate[string](p, `(document.querySelector('#queue-body tr.cursor') || {dataset: {}}).dataset.reviewId || ''`); c != "rev-claim-0003" {
			t.Errorf("cursor on %q after the decision, want the next row", c)
		}
		p.Press(kb.Escape)
		p.WaitHidden("#review-panel")
	})

	run("the help overlay lists the keys and Escape closes it", func(t *testing.T) {
		p := alice.T(t)
		p.Press("?")
		p.WaitFor("the help dialog to open", `() => document.getElementById('help-dialog').open`)
		p.WaitText("#help-keys", "reject: write the note, then")
		if got := p.Focused(); got != "help-close" {
			t.Errorf("focus on %q in the help dialog, want its Close button", got)
		}
		p.ScreenshotView("help-1280x800")
		p.Press(kb.Escape)
		p.WaitFor("the help dialog to close", `() => !document.getElementById('help-dialog').open`)
		// The dialog's close event, which hands the focus back, is
		// dispatched as a task of its own after the dialog closed.
		p.WaitFor("the focus back on the Shortcuts button after the help closed", `() => (document.activeElement || {}).id === 'help-open'`)
	})

	bob := uitest.Start(t, srv.URL)
	run("a second moderator sees a claim appear live", func(t *testing.T) {
		p := bob.T(t)
		p.Open("/")
		p.SignIn(bobToken)
		p.WaitLive("live")
		p.WaitText(row("rev-claim-0003"), "Unclaimed")
		before := uitest.Evaluate[string](p, `document.getElementById('live-status').dataset.events || '0'`)
		a := alice.T(t)
		a.Click(row("rev-claim-0003") + " button.claim")
		a.WaitText("#queue-notice", "You claimed rev-claim-0003")
		p.WaitText(row("rev-claim-0003")+" td.claim-cell", "Claimed by alice until")
		// It came by the stream: while live the queue is not polled.
		if after := uitest.Evaluate[string](p, `document.getElementById('live-status').dataset.events || '0'`); after == before {
			t.Errorf("no live change arrived (%s before, %s after)", before, after)
		}
		// Alice gives the claim back; Bob sees that live as well.
		a.Click(row("rev-claim-0003") + " a")
		a.WaitText("#review-id", "rev-claim-0003")
		a.Click("#review-release-btn")
		a.WaitText("#queue-notice", "You released your claim on rev-claim-0003")
		p.WaitText(row("rev-claim-0003")+" td.claim-cell", "Unclaimed")
	})

	run("a class that requires a claim refuses a decision without one", func(t *testing.T) {
		p := alice.T(t)
		p.WaitText("#review-state", "manual review")
		p.WaitText("#decision-claim-note", "This class needs a claim to decide")
		p.Type("#decision-note", "Fine to publish.")
		p.Click("#decide-accept")
		p.WaitText("#decision-error", "This class needs a claim before a decision")
		p.WaitText("#decision-error", "HTTP 409")
		if got := fake.Review("rev-claim-0003").State; got != "manual_review" {
			t.Fatalf("state %q after a refused decision", got)
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
		p.WaitText("#decision-claim-note", "you hold it")
		if v := uitest.Evaluate[string](p, `document.getElementById('decision-note').value`); v != "Fine to publish." {
			t.Errorf("note %q after claiming, want it kept", v)
		}
		p.Click("#decide-accept")
		p.WaitText("#decision-result", "Decision recorded: accepted")
		p.WaitGone(row("rev-claim-0003"))
		bob.T(t).WaitGone(row("rev-claim-0003"))
	})

	run("the review panel shows its timeline across requeue rounds", func(t *testing.T) {
		p := alice.T(t)
		p.Do("open the requeued review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/rev-round-0005'`))
		p.WaitText("#why-requeues", "requeued by carol: provider back after the outage")
		p.WaitText("#why-escalation", "provider unavailable")
		p.WaitText("#why-escalation", "in round 2")
		p.WaitText("#why-attempts-body", "Round 2, requeued by carol")
		p.WaitText(`#why-attempts-body tr[data-round="2"]`, "provider unavailable")
		p.WaitText("#why-attempts-body", "700 ms")
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#why-attempts-body tr.attempt').length`); n != 4 {
			t.Errorf("%d attempts in the timeline, want 4", n)
		}
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#why-attempts-body tr.attempt[data-round="2"]').length`); n != 2 {
			t.Errorf("%d attempts in round 2, want 2 (numbered on: 3 and 4)", n)
		}
		p.WaitText("#why-holds", "None recorded")
		p.WaitText("#why-votes", "No vote yet")
		p.WaitHidden("#timeline") // the raw event history stays the auditors'
		if n := len(fake.RequestsTo(http.MethodGet, "/v1/reviews/rev-round-0005/events")); n != 0 {
			t.Errorf("a moderator's page read /events %d times", n)
		}
		p.ScreenshotView("review-timeline-1280x800")
	})

	run("requeue one review from the keyboard", func(t *testing.T) {
		p := alice.T(t)
		p.Do("focus the heading", chromedp.Focus(chromedp.CSS("#review-title")))
		p.Press("q")
		p.WaitFor("the confirmation to open", `() => document.getElementById('confirm-dialog').open`)
		p.WaitText("#confirm-title", "Requeue review rev-round-0005")
		p.WaitText("#confirm-count", "1 review back to automated review")
		p.Press("once more, the provider is back")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "Done: 1 requeued.")
		p.WaitText("#confirm-outcomes", "rev-round-0005 — requeued to automated review")
		p.Press(kb.Escape)
		p.WaitFor("the confirmation to close", `() => !document.getElementById('confirm-dialog').open`)
		p.WaitGone(row("rev-round-0005"))
		p.WaitText("#review-state", "pending")
		var body map[string]any
		reqs := fake.RequestsTo(http.MethodPost, "/v1/manual-queue/rev-round-0005/requeue")
		if len(reqs) != 1 || json.Unmarshal([]byte(reqs[0].Body), &body) != nil || body["note"] != "once more, the provider is back" || body["expected_version"] == nil {
			t.Errorf("requeue requests %+v", reqs)
		}
	})

	run("hold and take off hold", func(t *testing.T) {
		p := alice.T(t)
		p.Do("go to the queue", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		p.WaitHidden("#review-panel")
		p.Do("focus the row", chromedp.Focus(chromedp.CSS(row("rev-hold-0004")+" a")))
		p.Press("h")
		p.WaitFor("the hold dialog to open", `() => document.getElementById('confirm-dialog').open`)
		p.WaitText("#confirm-title", "Put review rev-hold-0004 on hold")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-error", "Write why the review waits")
		p.Type("#confirm-note", "Waiting for legal to answer.")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "Done: 1 held.")
		p.Click("#confirm-cancel")
		p.WaitText(uitest.HeldRow("rev-hold-0004"), "On hold by alice")
		p.WaitText(uitest.HeldRow("rev-hold-0004"), "Waiting for legal to answer.")
		p.WaitText("#held-title", "On hold")
		p.WaitText("#queue-count", "1 on hold")
		bob.T(t).WaitText(uitest.HeldRow("rev-hold-0004"), "Waiting for legal")
		p.Do("focus the held row", chromedp.Focus(chromedp.CSS(uitest.HeldRow("rev-hold-0004")+" a")))
		p.Press("h")
		p.WaitText(row("rev-hold-0004"), "caption_suggestion")
		p.WaitText("#queue-notice", "is off hold")
		p.WaitHidden("#held-section")
	})

	run("bulk requeue by filter asks with the dry run's count and reports each item", func(t *testing.T) {
		p := alice.T(t)
		p.Do("filter by reason", chromedp.SetValue(chromedp.CSS("#queue-reason"), "budget_exhausted"),
			chromedp.Evaluate[chromedp.Void](`document.getElementById('queue-reason').dispatchEvent(new Event('change'))`))
		p.WaitText("#queue-count", "100 reviews waiting")
		p.WaitGone(row("rev-sla-0001"))
		p.WaitText("#bulk-requeue-filter", "Requeue all budget exhausted…")
		p.Click("#bulk-requeue-filter")
		p.WaitText("#confirm-count", "This sends 120 reviews (reason budget exhausted) back to automated review")
		p.WaitText("#confirm-ok", "Requeue 120 reviews")
		dry := fake.RequestsTo(http.MethodPost, "/v1/manual-queue/bulk/requeue")
		if len(dry) != 1 || !strings.Contains(dry[0].Body, `"dry_run":true`) || !strings.Contains(dry[0].Body, `"reason":"budget_exhausted"`) {
			t.Fatalf("dry run %+v", dry)
		}
		if !fake.InQueue("rev-outage-0000") {
			t.Fatal("the dry run requeued something")
		}
		p.Type("#confirm-note", "Provider recovered after the outage.")
		p.ScreenshotView("bulk-confirm-1280x800")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "Done: 120 requeued.")
		if n := uitest.Evaluate[int](p, `document.querySelectorAll('#confirm-outcomes li[data-outcome="requeued"]').length`); n != 120 {
			t.Errorf("%d requeued outcomes listed, want 120", n)
		}
		pages := fake.RequestsTo(http.MethodPost, "/v1/manual-queue/bulk/requeue")[1:]
		if len(pages) != 2 || !strings.Contains(pages[1].Body, `"cursor":"rev-outage-0099"`) {
			t.Errorf("requeue pages %+v, want two, the second after the first's cursor", pages)
		}
		p.Click("#confirm-cancel")
		p.WaitText("#queue-empty", "Nothing is waiting")
		// The other moderator saw them leave without reloading.
		b := bob.T(t)
		b.WaitGone(row("rev-outage-0000"))
		b.WaitGone(row("rev-outage-0119"))
		if fake.InQueue("rev-outage-0042") {
			t.Error("rev-outage-0042 still queued after the bulk requeue")
		}
		p.Do("clear the filter", chromedp.Evaluate[chromedp.Void](`(() => { const s = document.getElementById('queue-reason'); s.selectedIndex = 0; s.dispatchEvent(new Event('change')); })()`))
		p.WaitText(row("rev-sla-0001"), "caption_suggestion")
	})

	run("bulk actions on checked items show a conflict per item", func(t *testing.T) {
		p := alice.T(t)
		fake.Escalate("rev-pick-0006", "caption_suggestion", "budget_exhausted", 3, time.Minute, 1, nil)
		fake.Escalate("rev-pick-0007", "caption_suggestion", "budget_exhausted", 3, time.Minute, 2, nil)
		p.WaitText(row("rev-pick-0007"), "budget exhausted")
		p.Click(row("rev-pick-0006") + " input.select")
		p.Do("focus the row", chromedp.Focus(chromedp.CSS(row("rev-pick-0007")+" a")))
		p.Press("x")
		p.WaitText("#bulk-count", "2 selected")
		fake.RaceNextRequeue("rev-pick-0007") // a vote lands on it just before the requeue
		p.Click("#bulk-requeue")
		p.WaitText("#confirm-count", "This sends 2 reviews back")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "1 requeued, 1 conflict")
		p.WaitText(`#confirm-outcomes li[data-review-id="rev-pick-0007"]`, "conflict: it changed meanwhile")
		p.Click("#confirm-cancel")
		p.WaitGone(row("rev-pick-0006"))
		p.WaitText(row("rev-pick-0007"), "budget exhausted")

		// Release the claims of the checked items.
		p.Click(row("rev-pick-0007") + " button.claim")
		p.WaitText(row("rev-pick-0007")+" td.claim-cell", "Claimed by you")
		p.WaitText("#bulk-count", "1 selected")
		p.Click(row("rev-sla-0001") + " input.select")
		p.Click("#bulk-release")
		p.WaitText("#confirm-count", "This releases 2 claims")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "1 released, 1 not claimed")
		p.Click("#confirm-cancel")
		p.WaitText(row("rev-pick-0007")+" td.claim-cell", "Unclaimed")
		p.Click("#bulk-clear")
		p.WaitText("#bulk-count", "None selected")

		// Release by filter: the moderator's own claims, not another's.
		p.Click(row("rev-pick-0007") + " button.claim")
		p.WaitText(row("rev-pick-0007")+" td.claim-cell", "Claimed by you")
		p.Click(row("rev-sla-0001") + " button.claim")
		p.WaitText(row("rev-sla-0001")+" td.claim-cell", "Claimed by you")
		b := bob.T(t)
		b.Click(row("rev-hold-0004") + " button.claim")
		p.WaitText(row("rev-hold-0004")+" td.claim-cell", "Claimed by bob")
		p.WaitText("#bulk-release-filter", "Release my claims…")
		p.Click("#bulk-release-filter")
		p.WaitText("#confirm-count", "This releases 2 claims (claimed by you)")
		p.Click("#confirm-ok")
		p.WaitText("#confirm-summary", "Done: 2 released.")
		p.Click("#confirm-cancel")
		p.WaitText(row("rev-pick-0007")+" td.claim-cell", "Unclaimed")
		p.WaitText(row("rev-sla-0001")+" td.claim-cell", "Unclaimed")
		p.WaitText(row("rev-hold-0004")+" td.claim-cell", "Claimed by bob")
		var body map[string]any
		reqs := fake.RequestsTo(http.MethodPost, "/v1/manual-queue/bulk/release")
		if err := json.Unmarshal([]byte(reqs[len(reqs)-1].Body), &body); err != nil || fmt.Sprint(body["filter"]) != "map[claimed_by:alice]" {
			t.Errorf("release by filter sent %s", reqs[len(reqs)-1].Body)
		}
	})

	run("a broken stream falls back to polling and comes back live", func(t *testing.T) {
		p := alice.T(t)
		p.WaitLive("live")
		fake.RefuseStreams(true)
		p.WaitLive("polling")
		p.WaitText("#live-status", "Polling every 5 s")
		p.WaitText("#live-status", "retrying in")
		// While the stream is down the queue is still read.
		fake.Escalate("rev-poll-0008", "caption_suggestion", "attempts_exhausted", 3, time.Second, 1, nil)
		p.WaitText(row("rev-poll-0008"), "caption_suggestion")
		// Refused twice, it is retried with a growing delay; then it is let in.
		clocktest.WithinShows(t, uitest.WaitTimeout, "the stream to be retried after it was refused", func() (bool, string) {
			_, refused := fake.StreamCounts()
			return refused >= 2, fmt.Sprintf("refused %d times", refused)
		})
		fake.RefuseStreams(false)
		p.WaitLive("live")
		// It resumes where it stopped: the last event's ID goes back as
		// Last-Event-ID. (The other moderator's page has a stream of its
		// own, refused and retried too: the last of alice's is the one.)
		var last *uitest.FakeRequest
		for _, r := range fake.RequestsTo(http.MethodGet, "/v1/manual-queue/events") {
			if r.Auth == "Bearer "+moderatorToken {
				last = &r
			}
		}
		if last == nil || last.LastEventID == "" {
			t.Errorf("alice's retried stream %+v is missing or lacks Last-Event-ID", last)
		}
		// Live again: a new item arrives by the stream.
		fake.Escalate("rev-live-0009", "caption_suggestion", "attempts_exhausted", 3, time.Second, 1, nil)
		p.WaitText(row("rev-live-0009"), "caption_suggestion")
	})

	run("the SLA colour changes as time passes", func(t *testing.T) {
		p := alice.T(t)
		sel := row("rev-sla-0001") + " .sla-left"
		level := func() string { return uitest.Evaluate[string](p, `document.querySelector('`+sel+`').dataset.level`) }
		if got := level(); got != "ok" {
			t.Fatalf("level %q before the clock moves", got)
		}
		advance(p, 14*time.Minute) // at most 6 of 30 minutes left: the last quarter
		p.WaitFor("amber", `(sel) => document.querySelector(sel).dataset.level === 'warn'`, sel)
		p.WaitText(sel, "Due soon")
		if !p.HasClass(sel, "sla-warn") {
			t.Error("a due-soon item is not styled amber")
		}
		advance(p, 10*time.Minute)
		p.WaitFor("red", `(sel) => document.querySelector(sel).dataset.level === 'crit'`, sel)
		p.WaitText(sel, "Overdue by")
		if !p.HasClass(sel, "sla-crit") {
			t.Error("an overdue item is not styled red")
		}
		colour := uitest.Evaluate[string](p, `getComputedStyle(document.querySelector('`+sel+`')).color`)
		if colour != "rgb(180, 35, 24)" {
			t.Errorf("overdue colour %s, want the critical red", colour)
		}
	})

	run("screens at a phone's width", func(t *testing.T) {
		p := alice.T(t)
		p.Viewport(390, 844)
		p.Do("open a review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		p.WaitText(row("rev-sla-0001"), "Overdue")
		if over, wide := p.Overflow(); over > 0 {
			t.Errorf("the queue is %d px wider than a phone: %s", over, wide)
		}
		p.ScreenshotView("queue-phone")
		p.Do("open a review", chromedp.Evaluate[chromedp.Void](`location.hash = '#/reviews/rev-sla-0001'`))
		p.WaitText("#why-attempts-body", "deadline exceeded")
		if over, wide := p.Overflow(); over > 0 {
			t.Errorf("the review panel is %d px wider than a phone: %s", over, wide)
		}
		p.Do("scroll to the timeline", chromedp.Evaluate[chromedp.Void](`document.getElementById('why').scrollIntoView()`))
		p.ScreenshotView("review-timeline-phone")
		p.Click("#help-open")
		p.WaitFor("the help dialog to open", `() => document.getElementById('help-dialog').open`)
		p.ScreenshotView("help-phone")
		p.Click("#help-close")
		p.Do("filter by reason", chromedp.Evaluate[chromedp.Void](`location.hash = '#/queue'`))
		p.WaitText(row("rev-sla-0001"), "Overdue") // the queue drawn again, its buttons with it
		p.Click("#bulk-requeue-filter")
		p.WaitText("#confirm-count", "reviews")
		p.ScreenshotView("bulk-confirm-phone")
		p.Click("#confirm-cancel")
	})

	uitest.CheckConsoles(t, map[string]*uitest.Page{"alice": alice, "bob": bob})
}
