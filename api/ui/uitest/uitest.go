// Package uitest drives reviewledger's browser UI in headless Chromium for
// tests, through github.com/chromedp/chromedp. It knows the page's element
// IDs, so a test against any server that serves the UI (FakeAPI beside the
// page, as package ui's own tests serve it, or the real API) reads as steps
// a user takes.
//
// FakeAPI is an in-memory stand-in for the API routes the page uses. Package
// httpapi's contract test (api/httpapi/uicontract_test.go) sends the same
// requests to it and to the real server and fails on any difference in
// status or shape.
//
// Tests are skipped when no Chromium is installed and the environment
// variable CI is unset; with CI set, a missing browser fails the test.
// CHROMIUM names the executable when it is not on PATH as chromium.
// UI_SCREENSHOTS=<dir> makes Screenshot write full-page PNGs there.
package uitest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/reviewledger/reviewledger/eventstore/clock/clocktest"
)

// Bounds for a loaded CI machine; tests never assert on how long a step took.
const (
	StepTimeout = 30 * time.Second
	WaitTimeout = 20 * time.Second
)

// Chromium returns the path of the Chromium executable, or skips the test
// when there is none and CI is unset.
func Chromium(tb testing.TB) string {
	tb.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "" {
		tb.Skip("chromium is not installed (apt-get install -y chromium); with CI set this test fails instead")
	}
	tb.Fatal("chromium not found and CI is set: install it (apt-get install -y chromium) or set CHROMIUM to its path")
	return ""
}

// Page is one browser tab. Its methods fail the test they are bound to;
// bind a subtest with T.
type Page struct {
	tb      testing.TB
	browser *browser
}

type browser struct {
	ctx  context.Context
	base string

	mu      sync.Mutex
	console []chromedp.ConsoleMessage
}

// Start launches a fresh headless Chromium (its own user-data directory)
// for the UI served at base, such as an httptest.Server's URL. The browser
// stops when the test ends.
func Start(tb testing.TB, base string) *Page {
	tb.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(Chromium(tb)),
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
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.WindowSize(1440, 1000),
		chromedp.Env("TZ=UTC"),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx)
	b := &browser{ctx: ctx, base: strings.TrimSuffix(base, "/")}
	if err := chromedp.Do(ctx); err != nil {
		cancelTab()
		cancelAlloc()
		tb.Fatalf("start chromium: %v", err)
	}
	done := make(chan struct{})
	messages := chromedp.Console(ctx)
	go func() {
		defer close(done)
		for m, err := range messages {
			if err != nil {
				return
			}
			b.mu.Lock()
			b.console = append(b.console, m)
			b.mu.Unlock()
		}
	}()
	tb.Cleanup(func() {
		cancelTab()
		cancelAlloc()
		<-done
	})
	return &Page{tb: tb, browser: b}
}

// T returns the page bound to tb, for use inside a subtest.
func (p *Page) T(tb testing.TB) *Page { return &Page{tb: tb, browser: p.browser} }

// Context is the chromedp context of the tab, for actions this package
// does not wrap.
func (p *Page) Context() context.Context { return p.browser.ctx }

// ConsoleProblems returns the console errors and warnings, uncaught
// exceptions and CSP violations the page has reported so far. It leaves
// out the browser's notes on HTTP error statuses, which tests provoke.
func (p *Page) ConsoleProblems() []string {
	b := p.browser
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.console {
		if m.Source == "network" {
			continue
		}
		if m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.IsException() {
			out = append(out, m.String())
		}
	}
	return out
}

// Do runs actions, failing the test with what on error.
func (p *Page) Do(what string, steps ...chromedp.Action[chromedp.Void]) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(p.browser.ctx, StepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		p.tb.Fatalf("%s: %v", what, err)
	}
}

// Evaluate evaluates a JavaScript expression in the page.
func Evaluate[T any](p *Page, expr string) T {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(p.browser.ctx, StepTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		p.tb.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// Open loads the page at path (such as "/" or "/#/slo").
func (p *Page) Open(path string) {
	p.tb.Helper()
	p.Do("open "+path, chromedp.Navigate(p.browser.base+path), chromedp.WaitReady(chromedp.CSS("body")))
}

// WaitFor waits until the JavaScript function, called with args, returns
// true. On timeout it fails the test with what and the page's text.
func (p *Page) WaitFor(what, fn string, args ...any) {
	p.tb.Helper()
	ctx, cancel := context.WithTimeout(p.browser.ctx, WaitTimeout+time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.PollFunction[bool](fn,
		chromedp.WithPollingInterval(50*time.Millisecond),
		chromedp.WithPollingTimeout(WaitTimeout),
		chromedp.WithPollingArgs(args...)))
	if err != nil {
		p.tb.Fatalf("waiting for %s: %v\npage text:\n%s", what, err, Evaluate[string](p, `document.body.innerText`))
	}
}

// WaitNavigated is WaitFor across page loads: while the tab navigates
// (a sign-in through another site and back) the expression is evaluated
// again until it is true (clocktest.Within, WaitTimeout); errors of a page
// going away are retried. On timeout the test fails with what, and the
// last error or the page's URL is logged.
func (p *Page) WaitNavigated(what, expr string) {
	p.tb.Helper()
	var last string
	failed := true
	defer func() {
		if failed {
			p.tb.Logf("waiting for %s: last %s", what, last)
		}
	}()
	clocktest.Within(p.tb, WaitTimeout, what, func() bool {
		ctx, cancel := context.WithTimeout(p.browser.ctx, StepTimeout)
		defer cancel()
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		switch {
		case err != nil:
			last = err.Error()
		case !ok:
			last = "false at " + Evaluate[string](p, `location.href`)
		}
		return err == nil && ok
	})
	failed = false
}

// WaitText waits until the first element matching the CSS selector is shown
// (no hidden ancestor) and its text contains want.
func (p *Page) WaitText(sel, want string) {
	p.tb.Helper()
	p.WaitFor(sel+" to show "+want, `(sel, want) => {
		const e = document.querySelector(sel);
		return !!e && !e.closest('[hidden]') && e.textContent.includes(want);
	}`, sel, want)
}

// WaitHidden waits until the element exists and is hidden.
func (p *Page) WaitHidden(sel string) {
	p.tb.Helper()
	p.WaitFor(sel+" to be hidden", `(sel) => { const e = document.querySelector(sel); return !!e && !!e.closest('[hidden]'); }`, sel)
}

// WaitGone waits until no element matches the selector.
func (p *Page) WaitGone(sel string) {
	p.tb.Helper()
	p.WaitFor(sel+" to be gone", `(sel) => !document.querySelector(sel)`, sel)
}

// Text returns the text content of the first element matching sel.
func (p *Page) Text(sel string) string {
	p.tb.Helper()
	return Evaluate[string](p, `document.querySelector(`+jsString(sel)+`).textContent`)
}

// HasClass reports whether the first element matching sel has class.
func (p *Page) HasClass(sel, class string) bool {
	p.tb.Helper()
	return Evaluate[bool](p, `document.querySelector(`+jsString(sel)+`).classList.contains(`+jsString(class)+`)`)
}

// Click clicks the first visible element matching sel.
func (p *Page) Click(sel string) {
	p.tb.Helper()
	p.Do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible))
}

// Type types s into the element matching sel, as keystrokes; end s with
// kb.Enter to submit.
func (p *Page) Type(sel, s string) {
	p.tb.Helper()
	p.Do("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), s, chromedp.NodeVisible))
}

// SignIn submits token on the sign-in form, from the keyboard. It does not
// wait: the caller waits for what it expects next.
func (p *Page) SignIn(token string) {
	p.tb.Helper()
	p.Type("#token", token+kb.Enter)
}

// Screenshot writes a full-page PNG named name.png to $UI_SCREENSHOTS, when
// that is set.
func (p *Page) Screenshot(name string) {
	p.tb.Helper()
	dir := os.Getenv("UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.browser.ctx, StepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.tb.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.tb.Fatal(err)
	}
}

// ScreenshotView writes a PNG of what the viewport shows (not the whole
// page), named name.png, to $UI_SCREENSHOTS when that is set: a screen as
// a person sees it, dialogs included.
func (p *Page) ScreenshotView(name string) {
	p.tb.Helper()
	dir := os.Getenv("UI_SCREENSHOTS")
	if dir == "" {
		return
	}
	ctx, cancel := context.WithTimeout(p.browser.ctx, StepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		p.tb.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.tb.Fatal(err)
	}
}

// Viewport sets the size of the page's viewport in CSS pixels, such as
// 1280×800 for a laptop or 390×844 for a phone.
func (p *Page) Viewport(width, height int64) {
	p.tb.Helper()
	p.Do("set the viewport", chromedp.EmulateViewport(width, height))
}

// Charts are the dashboard's charts, by figure ID: each must have been
// drawn as an SVG whose lines or bars hold data, with its numbers in a
// table.
var Charts = []string{"chart-ratio", "chart-budget", "chart-queue", "chart-latency", "chart-attempts"}

// WaitCharts waits until every chart of the dashboard is drawn from data:
// an SVG with at least one line holding a point (or, for the attempt
// distributions, a bar) and a data table with a row, and fails the test
// when the page overflows its viewport sideways.
func (p *Page) WaitCharts() {
	p.tb.Helper()
	for _, id := range Charts {
		p.WaitFor("chart "+id+" to be drawn from data", `(id) => {
			const fig = document.getElementById(id);
			if (!fig || fig.closest('[hidden]')) return false;
			const svg = fig.querySelector('svg.chart-svg');
			const data = [...fig.querySelectorAll('path.line')].some((l) => Number(l.dataset.points) > 0) || !!fig.querySelector('rect.col');
			const rows = fig.querySelectorAll('table.chart-data tbody tr').length;
			// Drawn for the width the page has now, not an earlier one.
			const fits = [...fig.querySelectorAll('svg.chart-svg')].every((s) =>
				Math.abs(Number(s.getAttribute('width')) - Math.max(240, s.parentElement.clientWidth)) <= 1);
			return !!svg && data && rows > 0 && fits;
		}`, id)
	}
	if over := Evaluate[bool](p, `document.documentElement.scrollWidth > window.innerWidth + 1`); over {
		wide := Evaluate[string](p, `Array.from(document.querySelectorAll('body *'))
			.filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('[hidden]'))
			.slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + (e.className.baseVal ?? e.className) + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')`)
		p.tb.Errorf("the page is wider than its %d px viewport: %d px (%s)", Evaluate[int](p, `window.innerWidth`), Evaluate[int](p, `document.documentElement.scrollWidth`), wide)
	}
}

// Row is the CSS selector of the manual-queue row of a review.
func Row(reviewID string) string { return `#queue-body tr[data-review-id=` + jsString(reviewID) + `]` }

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Press sends keys, one key event each, to the element that has focus,
// as a person typing them; kb.Enter, kb.ArrowDown and the like name the
// keys without a character.
func (p *Page) Press(keys ...string) {
	p.tb.Helper()
	for _, k := range keys {
		p.Do("press "+k, keystrokes(k))
	}
}

// PressCtrl sends key with Ctrl held, such as Ctrl+Enter.
func (p *Page) PressCtrl(key string) {
	p.tb.Helper()
	p.Do("press Ctrl+"+key, chromedp.KeyEvent(key, chromedp.KeyModifiers(chromedp.ModifierCtrl)))
}

// keystrokes types keys as a keyboard does: each key down carries its
// text, so a page that prevents the default of keydown keeps the character
// from being typed, as in a browser in use. (chromedp.KeyEvent sends the
// character as an event of its own, which preventDefault cannot stop.)
func keystrokes(keys string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		for _, r := range keys {
			var send []*input.DispatchKeyEventParams
			for _, ev := range kb.Encode(r) {
				if ev.Type == kb.KeyChar && len(send) > 0 {
					send[0].Text, send[0].UnmodifiedText = ev.Text, ev.UnmodifiedText
					continue
				}
				send = append(send, ev)
			}
			for _, ev := range send {
				if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, *ev); err != nil {
					return fmt.Errorf("key %q: %w", r, err)
				}
			}
		}
		return nil
	})
}

// Focused returns the ID of the element that has focus ("" for none).
func (p *Page) Focused() string {
	p.tb.Helper()
	return Evaluate[string](p, `document.activeElement ? document.activeElement.id : ''`)
}

// WaitLive waits until the queue's live-update indicator is in mode:
// "live" (the stream of queue changes is open), "polling" (it broke; the
// queue is read every few seconds and the stream retried), "connecting".
func (p *Page) WaitLive(mode string) {
	p.tb.Helper()
	p.WaitFor("the queue to be "+mode, `(mode) => document.getElementById('live-status').dataset.mode === mode`, mode)
}

// AdvanceClock moves the page's clock (Date.now) forward by d, for what
// the page counts against time, such as an item's time left against its
// SLA. Calls add up.
func (p *Page) AdvanceClock(d time.Duration) {
	p.tb.Helper()
	p.Do("advance the clock", chromedp.Evaluate[chromedp.Void](`(() => {
		if (!window.__uitestNow) {
			window.__uitestNow = Date.now.bind(Date);
			window.__uitestSkew = 0;
			Date.now = () => window.__uitestNow() + window.__uitestSkew;
		}
		window.__uitestSkew += `+strconv.FormatInt(d.Milliseconds(), 10)+`;
	})()`))
}

// Unlabelled lists the controls of the page without a label or an
// accessible name (their markup), for tests that every control is
// labelled for a screen reader.
func (p *Page) Unlabelled() []string {
	p.tb.Helper()
	return Evaluate[[]string](p, `[
		...Array.from(document.querySelectorAll('input, select, textarea'))
			.filter((e) => e.labels.length === 0 && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby')),
		...Array.from(document.querySelectorAll('button, a, dialog, [role="toolbar"], [role="group"]'))
			.filter((e) => !e.textContent.trim() && !e.getAttribute('aria-label') && !e.getAttribute('aria-labelledby')),
	].map((e) => e.outerHTML.slice(0, 200))`)
}

// Overflow reports how many CSS pixels the page is wider than its
// viewport (0 when it fits) and the widest elements, for the phone checks.
func (p *Page) Overflow() (int, string) {
	p.tb.Helper()
	over := Evaluate[int](p, `document.documentElement.scrollWidth - window.innerWidth`)
	if over <= 0 {
		return 0, ""
	}
	return over, Evaluate[string](p, `Array.from(document.querySelectorAll('body *'))
		.filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('[hidden]'))
		.slice(0, 5).map((e) => e.tagName + '#' + e.id + '.' + (e.className.baseVal ?? e.className) + ' ' + Math.round(e.getBoundingClientRect().right)).join(', ')`)
}

// HeldRow is the CSS selector of the row of a review on hold.
func HeldRow(reviewID string) string {
	return `#held-body tr[data-review-id=` + jsString(reviewID) + `]`
}

// InOrder returns a function that runs named steps as subtests of t, one
// after the other. Each step builds on the ones before it, so once one
// fails the rest are not run (each says so in the log).
func InOrder(t *testing.T) func(name string, step func(t *testing.T)) {
	return func(name string, step func(t *testing.T)) {
		t.Helper()
		if t.Failed() {
			t.Logf("not run after an earlier failure: %s", name)
			return
		}
		t.Run(name, step)
	}
}

// CheckConsoles fails t for every page, by name, whose browser console
// reported problems (ConsoleProblems).
func CheckConsoles(t *testing.T, pages map[string]*Page) {
	t.Helper()
	for name, page := range pages {
		if probs := page.ConsoleProblems(); len(probs) > 0 {
			t.Errorf("%s's browser console reported problems:\n%s", name, strings.Join(probs, "\n"))
		}
	}
}
