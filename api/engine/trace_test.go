package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// submitterTrace is the traceparent a submitter sends.
const submitterTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

func tracedHarness(t *testing.T, steps []step) (*harness, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return newHarness(t, steps, func(c *Config) { c.Tracer = tp }), exp
}

// attrs returns a span's attributes by key.
func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// noContent fails when any span attribute or event attribute holds the
// review's content or a finding's reasons.
func noContent(t *testing.T, spans tracetest.SpanStubs, secrets ...string) {
	t.Helper()
	for _, s := range spans {
		all := slices.Clone(s.Attributes)
		for _, ev := range s.Events {
			all = append(all, ev.Attributes...)
		}
		all = append(all, attribute.String("status", s.Status.Description), attribute.String("name", s.Name))
		for _, kv := range all {
			for _, secret := range secrets {
				if strings.Contains(kv.Value.String(), secret) {
					t.Errorf("span %s: attribute %s holds %q", s.Name, kv.Key, secret)
				}
			}
		}
	}
}

// TestTraceOfAReview: a review whose first attempt times out and whose
// second gets a finding is one trace, a child of the submitter's span:
// the submission, both provider calls (the first ending deadline_exceeded),
// the backoff between them, and the finding's conditional commit; no span
// holds the content or the finding's reasons.
func TestTraceOfAReview(t *testing.T) {
	t.Parallel()
	h, exp := tracedHarness(t, []step{hang, finding("rev-tr", domain.DecisionAccepted, "reason-text-secret")})
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": submitterTrace})
	submitter := trace.SpanContextFromContext(ctx)
	if _, _, err := h.Submit(ctx, SubmitRequest{ReviewID: "rev-tr", ContentClass: "c", ContentType: "text/plain",
		Content: []byte("content-secret-words"), Actor: ledger.Actor{Name: "tester"}}); err != nil {
		t.Fatal(err)
	}
	if got := h.drive(t, "rev-tr"); got.State() != domain.StateAccepted {
		t.Fatalf("state %s", got.State())
	}
	if got := h.load(t, "rev-tr").TraceParent(); !strings.HasPrefix(got, "00-"+submitter.TraceID().String()+"-") {
		t.Errorf("recorded traceparent %q, not in the submitter's trace", got)
	}

	spans := exp.GetSpans()
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
		if s.SpanContext.TraceID() != submitter.TraceID() {
			t.Errorf("span %s is in trace %s, not the submitter's %s", s.Name, s.SpanContext.TraceID(), submitter.TraceID())
		}
	}
	slices.Sort(names)
	if want := []string{SpanAttempt, SpanAttempt, SpanWait, SpanFinding, SpanSubmit}; !slices.Equal(names, want) {
		t.Fatalf("spans %v, want %v", names, want)
	}
	byName := func(name string, attempt int64) tracetest.SpanStub {
		for _, s := range spans {
			if s.Name == name && (attempt == 0 || attrs(s)[AttrAttempt].AsInt64() == attempt) {
				return s
			}
		}
		t.Fatalf("no %s span for attempt %d", name, attempt)
		return tracetest.SpanStub{}
	}
	submit := byName(SpanSubmit, 0)
	if submit.Parent.SpanID() != submitter.SpanID() || !submit.Parent.IsRemote() {
		t.Errorf("submit span's parent %s, want the submitter's span %s", submit.Parent.SpanID(), submitter.SpanID())
	}
	if a := attrs(submit); a[AttrReviewID].AsString() != "rev-tr" || a[AttrContentClass].AsString() != "c" || !a[AttrCreated].AsBool() {
		t.Errorf("submit span attributes %v", submit.Attributes)
	}
	first, second := byName(SpanAttempt, 1), byName(SpanAttempt, 2)
	if a := attrs(first); a[AttrClassification].AsString() != string(domain.ClassDeadlineExceeded) || a[AttrTimeoutMS].AsInt64() != 2000 || first.Status.Code != codes.Error {
		t.Errorf("first attempt: %v, status %v", first.Attributes, first.Status)
	}
	if a := attrs(second); a[AttrOutcome].AsString() != "finding" || a[AttrState].AsString() != "accepted" || second.Status.Code == codes.Error {
		t.Errorf("second attempt: %v, status %v", second.Attributes, second.Status)
	}
	if !first.EndTime.After(first.StartTime) || second.StartTime.Before(first.EndTime) {
		t.Errorf("attempts from %s to %s, then from %s", first.StartTime, first.EndTime, second.StartTime)
	}
	wait := byName(SpanWait, 1)
	if !wait.EndTime.After(wait.StartTime) || wait.StartTime.Before(first.EndTime) || wait.EndTime.After(second.StartTime) {
		t.Errorf("backoff from %s to %s, between attempts ending %s and starting %s", wait.StartTime, wait.EndTime, first.EndTime, second.StartTime)
	}
	commit := byName(SpanFinding, 2)
	if a := attrs(commit); a[AttrConflict].AsBool() || a[AttrSource].AsString() != domain.SourceResponse || a[AttrState].AsString() != "accepted" {
		t.Errorf("commit: %v", commit.Attributes)
	}
	// Every span but the submission hangs off the recorded trace context,
	// the submission's.
	for _, s := range spans {
		if s.Name != SpanSubmit && s.Parent.SpanID() != submit.SpanContext.SpanID() {
			t.Errorf("%s's parent is %s, not the submit span %s", s.Name, s.Parent.SpanID(), submit.SpanContext.SpanID())
		}
	}
	noContent(t, spans, "content-secret-words", "reason-text-secret")
}

// TestTraceOfConflictsAndEscalation: a callback for an attempt no longer
// in flight is a conditional commit that fails, marked as a conflict; a
// review whose attempts run out is escalated in a span of its own.
func TestTraceOfConflictsAndEscalation(t *testing.T) {
	t.Parallel()
	h, exp := tracedHarness(t, []step{failure(domain.ClassProviderUnavailable, 0)})
	h.run(t, "rev-esc", "c")
	hdr, body := h.signedCallback("rev-esc", 1, "accepted", "w-late")
	if err := h.HandleCallback(context.Background(), "rev-esc", hdr, body); !errors.Is(err, ErrConflictingCompletion) {
		t.Fatalf("late callback: %v", err)
	}
	var escalations, conflicts, attempts int
	traces := map[trace.TraceID]bool{}
	for _, s := range exp.GetSpans() {
		traces[s.SpanContext.TraceID()] = true
		a := attrs(s)
		switch s.Name {
		case SpanEscalate:
			escalations++
			if a[AttrReason].AsString() != string(domain.ReasonAttemptsExhausted) || a[AttrState].AsString() != string(domain.StateManualReview) {
				t.Errorf("escalation: %v", s.Attributes)
			}
		case SpanFinding:
			conflicts++
			if !a[AttrConflict].AsBool() || a[AttrSource].AsString() != domain.SourceCallback || s.Status.Code != codes.Error ||
				len(s.Events) != 1 || s.Events[0].Name != "conflicting_completion" {
				t.Errorf("refused callback: %v, status %v, events %v", s.Attributes, s.Status, s.Events)
			}
		case SpanAttempt:
			attempts++
		}
	}
	if escalations != 1 || conflicts != 1 || attempts != 3 || len(traces) != 1 {
		t.Errorf("%d escalations, %d refused commits, %d attempts in %d traces; want 1, 1, 3 in 1", escalations, conflicts, attempts, len(traces))
	}
	noContent(t, exp.GetSpans(), "content of rev-esc")
}

// With the default, global provider (no exporter set up) nothing is
// recorded, yet a submitter's trace context is kept for the review and
// carried on: tracing off still propagates.
func TestTracingOffPropagates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, []step{finding("rev-off", domain.DecisionRejected)})
	ctx := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": submitterTrace})
	if _, _, err := h.Submit(ctx, SubmitRequest{ReviewID: "rev-off", ContentClass: "c", ContentType: "text/plain", Content: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if got := h.load(t, "rev-off").TraceParent(); got != submitterTrace {
		t.Errorf("recorded %q, want the submitter's %q", got, submitterTrace)
	}
	h.submit(t, "rev-none", "c")
	if got := h.load(t, "rev-none").TraceParent(); got != "" {
		t.Errorf("untraced submission recorded %q", got)
	}
	if sc := trace.SpanContextFromContext(ReviewContext(context.Background(), h.load(t, "rev-off"))); sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("review context %v", sc)
	}
}

// TestQuietEngineAsNoop: an engine given the no-op provider (serve's
// when tracing is off) builds no spans, and still records and passes on
// what an engine starting its spans on a no-op tracer does: the
// submitter's traceparent in the ledger and to the provider on every
// attempt, after a backoff too; nothing for an untraced submission.
func TestQuietEngineAsNoop(t *testing.T) {
	t.Parallel()
	// opaque is a no-op provider the engine cannot tell from a real one.
	type opaque struct{ trace.TracerProvider }
	run := func(tp trace.TracerProvider, parent string) (quiet bool, recorded string, sent []string) {
		h := newHarness(t, []step{failure(domain.ClassTransportError, 0), finding("rev-q", domain.DecisionAccepted)},
			func(c *Config) { c.Tracer = tp })
		ctx := context.Background()
		if parent != "" {
			ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": parent})
		}
		if _, _, err := h.Submit(ctx, SubmitRequest{ReviewID: "rev-q", ContentClass: "c", ContentType: "text/plain", Content: []byte("x")}); err != nil {
			t.Fatal(err)
		}
		if got := h.drive(t, "rev-q"); got.State() != domain.StateAccepted {
			t.Fatalf("state %s", got.State())
		}
		return h.quiet(), h.load(t, "rev-q").TraceParent(), h.prov.Parents()
	}
	for _, parent := range []string{submitterTrace, ""} {
		quiet, recorded, sent := run(noop.NewTracerProvider(), parent)
		loud, wantRecorded, wantSent := run(opaque{noop.NewTracerProvider()}, parent)
		if !quiet || loud {
			t.Fatalf("quiet %v with the no-op provider, %v with one it cannot see as no-op", quiet, loud)
		}
		if recorded != wantRecorded || recorded != parent {
			t.Errorf("parent %q: quiet engine recorded %q, the other %q", parent, recorded, wantRecorded)
		}
		if want := []string{parent, parent}; !slices.Equal(sent, wantSent) || !slices.Equal(sent, want) {
			t.Errorf("parent %q: quiet engine's calls carried %q, the other's %q, want %q", parent, sent, wantSent, want)
		}
	}
}
