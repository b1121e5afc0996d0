package httpapi

import (
	"context"
	"errors"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// traceContext accepts a W3C traceparent (and tracestate) from the
// caller: the request's context carries it as the remote parent of the
// spans the request makes (a submission's span, so the review joins the
// submitter's trace).
func (s *Server) traceContext(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.Header.Get("traceparent") != "" {
			c.SetRequest(r.WithContext(propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))))
		}
		return next(c)
	}
}

func (s *Server) tracer() trace.Tracer {
	tp := s.cfg.Tracer
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	// The instrumentation scope keeps the name it had before the HTTP
	// adapter moved to api/httpapi, so spans read as they always did.
	return tp.Tracer("github.com/reviewledger/reviewledger/api")
}

// startDecision starts the span of a moderator's decision in the review's
// trace, linked to the caller's span when the request carried one.
func (s *Server) startDecision(ctx context.Context, rv *ledger.Snapshot) (context.Context, trace.Span) {
	parent := ctx
	var opts []trace.SpanStartOption
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() && rv.TraceParent() != "" {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller}))
		parent = trace.ContextWithSpanContext(ctx, trace.SpanContext{})
	}
	opts = append(opts, trace.WithAttributes(engine.AttrReviewID.String(rv.ID()), engine.AttrContentClass.String(rv.Class())))
	return s.tracer().Start(engine.ReviewContext(parent, rv), engine.SpanDecision, opts...)
}

// endDecision records the decision's state, or its conflict.
func endDecision(span trace.Span, next *ledger.Snapshot, err error) {
	conflict := errors.Is(err, eventstore.ErrWrongExpectedVersion)
	span.SetAttributes(engine.AttrConflict.Bool(conflict))
	switch {
	case err != nil:
		span.SetStatus(codes.Error, "decision not recorded")
	default:
		span.SetAttributes(engine.AttrState.String(string(next.State())))
	}
	span.End()
}
