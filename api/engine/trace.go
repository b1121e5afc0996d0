package engine

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// Tracing. Each review is one trace: its submit span is a child of the
// submitter's span when the request carried a W3C traceparent, and its
// context is recorded with the Submitted event (ledger.Actor.TraceParent),
// so that whichever process works the review later, after restarts and
// parked waits, puts its spans in the same trace: one per provider call,
// the backoff waits, each conditional commit of a finding (a refused one
// marked as a conflict), escalations. The provider call sends the
// attempt span's traceparent. Spans carry identifiers, numbers and
// classifications, never content, reasons or notes.

// TracerName is the instrumentation scope of the engine's spans.
const TracerName = "github.com/reviewledger/reviewledger/api/engine"

// Span attribute keys.
const (
	AttrReviewID       = attribute.Key("reviewledger.review_id")
	AttrContentClass   = attribute.Key("reviewledger.content_class")
	AttrAttempt        = attribute.Key("reviewledger.attempt")
	AttrProvider       = attribute.Key("reviewledger.provider")
	AttrTimeoutMS      = attribute.Key("reviewledger.attempt_timeout_ms")
	AttrRemainingMS    = attribute.Key("reviewledger.remaining_budget_ms")
	AttrOutcome        = attribute.Key("reviewledger.outcome")
	AttrClassification = attribute.Key("reviewledger.classification")
	AttrSource         = attribute.Key("reviewledger.source")
	AttrConflict       = attribute.Key("reviewledger.conflict")
	AttrReason         = attribute.Key("reviewledger.escalation_reason")
	AttrState          = attribute.Key("reviewledger.state")
	AttrWaitReason     = attribute.Key("reviewledger.wait")
	AttrCreated        = attribute.Key("reviewledger.created")
)

// Span names.
const (
	SpanSubmit   = "review.submit"
	SpanAttempt  = "review.attempt"
	SpanWait     = "review.backoff"
	SpanFinding  = "review.commit_finding"
	SpanEscalate = "review.escalate"
	SpanDecision = "review.decision"
)

// propagator is W3C trace context, whatever the process's global
// propagator is.
var propagator = propagation.TraceContext{}

// quiet reports whether spans are sure to record nothing: the engine was
// given OpenTelemetry's no-op provider (serve's when tracing is off).
// Such a provider's span is its parent's context and nothing else, so a
// quiet engine builds no span and no attributes, and passes the review's
// trace context on as the no-op span would (TestQuietEngineAsNoop).
func (e *Engine) quiet() bool {
	_, ok := e.cfg.Tracer.(noop.TracerProvider)
	return ok
}

// idle is the span a quiet engine gives: it records nothing.
var idle = trace.SpanFromContext(context.Background())

func (e *Engine) tracer() trace.Tracer {
	tp := e.cfg.Tracer
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// start starts a span at the engine clock's now: spans agree with the
// times the ledger records.
func (e *Engine) start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return e.tracer().Start(ctx, name, append(opts, trace.WithTimestamp(e.clock.Now()))...)
}

// end ends span at the engine clock's now, recording err's kind (never
// its text, which may quote what it was given) when there is one.
func (e *Engine) end(span trace.Span, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetStatus(codes.Error, errorKind(err))
	}
	span.End(trace.WithTimestamp(e.clock.Now()))
}

// TraceParent returns the W3C traceparent of ctx's span; "" when it has
// none.
func TraceParent(ctx context.Context) string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "" // what the propagator would inject: nothing
	}
	c := propagation.MapCarrier{}
	propagator.Inject(ctx, c)
	return c["traceparent"]
}

// ReviewContext returns ctx with the review's recorded trace as the
// remote parent, unless ctx already has a span (a callback carrying the
// provider's traceparent) or the review recorded none.
func ReviewContext(ctx context.Context, snap *ledger.Snapshot) context.Context {
	if trace.SpanContextFromContext(ctx).IsValid() || snap == nil || snap.TraceParent() == "" {
		return ctx
	}
	return propagator.Extract(ctx, propagation.MapCarrier{"traceparent": snap.TraceParent()})
}

// startSubmit starts the submit span; its context goes into the actor of
// the Submitted event.
func (e *Engine) startSubmit(ctx context.Context, req *SubmitRequest) (context.Context, trace.Span) {
	if e.quiet() {
		req.Actor.TraceParent = TraceParent(ctx)
		return ctx, idle
	}
	ctx, span := e.start(ctx, SpanSubmit, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrReviewID.String(req.ReviewID), AttrContentClass.String(req.ContentClass)))
	req.Actor.TraceParent = TraceParent(ctx)
	return ctx, span
}

func errorKind(err error) string {
	for _, k := range []struct {
		target error
		name   string
	}{
		{domain.ErrInvalidReviewID, "invalid_review_id"}, {domain.ErrUnknownClass, "unknown_class"},
		{domain.ErrReviewExists, "review_exists"}, {domain.ErrReviewNotFound, "review_not_found"},
		{ErrConflictingCompletion, "conflicting_completion"}, {domain.ErrInvalidFinding, "invalid_finding"},
		{eventstore.ErrWrongExpectedVersion, "wrong_expected_version"}, {eventstore.ErrUnavailable, "store_unavailable"},
	} {
		if errors.Is(err, k.target) {
			return k.name
		}
	}
	return "error"
}

// startAttempt starts the span of one provider call, in the review's
// trace; the call's context carries it to the provider.
func (e *Engine) startAttempt(ctx context.Context, j *job, attempt int, timeout time.Duration, provider string) (context.Context, trace.Span) {
	if e.quiet() {
		return ReviewContext(ctx, j.snap), idle
	}
	return e.start(ReviewContext(ctx, j.snap), SpanAttempt, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(AttrReviewID.String(j.id), AttrContentClass.String(j.snap.Class()), AttrAttempt.Int(attempt),
			AttrProvider.String(provider), AttrTimeoutMS.Int64(timeout.Milliseconds()), AttrRemainingMS.Int64(max(0, j.snap.Remaining(e.clock.Now()).Milliseconds()))))
}

// endAttempt records what the call came to, when it came.
func endAttempt(span trace.Span, a *answer) {
	if !span.IsRecording() {
		return // the attributes would go nowhere
	}
	switch {
	case a.Finding != nil:
		span.SetAttributes(AttrOutcome.String("finding"), AttrState.String(string(a.Finding.State)))
	case a.async:
		span.SetAttributes(AttrOutcome.String("accepted_for_callback"))
	default:
		span.SetAttributes(AttrOutcome.String("failure"), AttrClassification.String(string(a.Failure.Classification)))
		span.SetStatus(codes.Error, string(a.Failure.Classification))
	}
	span.End(trace.WithTimestamp(a.at))
}

// traceWait records a wait the review parks for (a backoff or a
// Retry-After before its next attempt) as a span from now to until; a
// wait for a callback is the attempt's, and a wait of nothing no span.
func (e *Engine) traceWait(j *job, p plan, now time.Time) {
	if e.quiet() || p.step.Kind != domain.StepWait || !p.step.Until.After(now) || j.snap == nil {
		return
	}
	if n, _, _, _ := p.after.InFlight(); n != 0 {
		return // awaiting the attempt's callback
	}
	_, span := e.tracer().Start(ReviewContext(context.Background(), j.snap), SpanWait, trace.WithTimestamp(now),
		trace.WithAttributes(AttrReviewID.String(j.id), AttrAttempt.Int(p.after.Attempts()), AttrWaitReason.String("backoff")))
	span.End(trace.WithTimestamp(p.step.Until))
}

// traceCommit starts the span of a step that commits a finding or an
// escalation; the function returned ends it with the commit's error (a
// wrong expected revision, or a finding the review refused, is the
// conflict). Steps committing neither get no span.
func (e *Engine) traceCommit(ctx context.Context, snap *ledger.Snapshot, events []domain.Event, refused *domain.Conflict) func(error) {
	if e.quiet() {
		return func(error) {}
	}
	name, attrs := "", []attribute.KeyValue{AttrReviewID.String(snap.ID())}
	for _, ev := range events {
		switch ev := ev.(type) {
		case domain.FindingReceived:
			name = SpanFinding
			attrs = append(attrs, AttrAttempt.Int(ev.Attempt), AttrSource.String(ev.Source), AttrState.String(string(ev.State)))
		case domain.Escalated:
			if name == "" {
				name = SpanEscalate
			}
			attrs = append(attrs, AttrReason.String(string(ev.Reason)), AttrState.String(string(ev.State)))
		}
	}
	if name == "" && refused != nil {
		name = SpanFinding
		attrs = append(attrs, AttrAttempt.Int(refused.Attempt), AttrSource.String(refused.Source))
	}
	if name == "" {
		return func(error) {}
	}
	_, span := e.start(ReviewContext(ctx, snap), name, trace.WithAttributes(attrs...))
	return func(err error) {
		conflict := refused != nil || errors.Is(err, eventstore.ErrWrongExpectedVersion) || errors.Is(err, ErrConflictingCompletion)
		span.SetAttributes(AttrConflict.Bool(conflict))
		if conflict {
			reason := "wrong_expected_version"
			if refused != nil {
				reason = string(refused.Reason)
			}
			span.AddEvent("conflicting_completion", trace.WithAttributes(attribute.String("reviewledger.conflict_reason", reason)))
		}
		e.end(span, err)
	}
}

// traceCallback starts the span of a callback's conditional commit, in
// the trace of the provider's request when it carried one (the attempt's,
// which the provider was sent), the review's otherwise.
func (e *Engine) traceCallback(ctx context.Context, snap *ledger.Snapshot) (context.Context, func(error)) {
	if e.quiet() {
		return ReviewContext(ctx, snap), func(error) {}
	}
	ctx, span := e.start(ReviewContext(ctx, snap), SpanFinding, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(AttrReviewID.String(snap.ID()), AttrSource.String(domain.SourceCallback)))
	return ctx, func(err error) {
		conflict := errors.Is(err, ErrConflictingCompletion)
		span.SetAttributes(AttrConflict.Bool(conflict))
		if conflict {
			span.AddEvent("conflicting_completion")
		}
		e.end(span, err)
	}
}
