package httpapi

import (
	"context"
	"net/http"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/reviewledger/reviewledger/api/engine"
	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// tracingRunner records the trace context of the submissions it gets and
// records it with the review, as the engine does.
type tracingRunner struct {
	*fakeRunner
	seen []trace.SpanContext
}

func (r *tracingRunner) Submit(ctx context.Context, req engine.SubmitRequest) (*ledger.Snapshot, bool, error) {
	r.seen = append(r.seen, trace.SpanContextFromContext(ctx))
	req.Actor.TraceParent = engine.TraceParent(ctx)
	return r.fakeRunner.Submit(ctx, req)
}

const callerTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// A submitter's traceparent reaches the engine with the request; a
// moderator's decision is a span in the review's trace, linked to the
// moderator's own when the request carried one.
func TestTraceContext(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	var runner *tracingRunner
	h := newHarness(t, func(c *Config, d *Deps) {
		c.Tracer = tp
		runner = &tracingRunner{fakeRunner: d.Reviews.(*fakeRunner)}
		d.Reviews = runner
	})
	rec := h.do("POST", "/v1/reviews", submitterToken, submitJSON("tr1", "caption_suggestion", "secret words"), "traceparent", callerTrace)
	if rec.Code != http.StatusAccepted {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if len(runner.seen) != 1 || runner.seen[0].TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || !runner.seen[0].IsRemote() {
		t.Fatalf("the engine got trace contexts %v", runner.seen)
	}
	h.escalate("tr1", domain.ReasonAttemptsExhausted)
	const moderatorTrace = "00-11111111111111111111111111111111-2222222222222222-01"
	rec = h.do("POST", "/v1/reviews/tr1/decision", moderatorToken, decisionJSON("accepted", 1, "a note that stays out"), "traceparent", moderatorTrace)
	if rec.Code != http.StatusOK {
		t.Fatalf("decision: %d %s", rec.Code, rec.Body)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != engine.SpanDecision {
		t.Fatalf("spans %v, want one decision", spans)
	}
	s := spans[0]
	if s.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Errorf("decision in trace %s under %s, want the review's", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.TraceID().String() != "11111111111111111111111111111111" {
		t.Errorf("links %v, want the moderator's request", s.Links)
	}
	for _, kv := range s.Attributes {
		if v := kv.Value.String(); v == "a note that stays out" || v == "secret words" {
			t.Errorf("attribute %s holds content", kv.Key)
		}
	}
	var state string
	for _, kv := range s.Attributes {
		if kv.Key == engine.AttrState {
			state = kv.Value.AsString()
		}
	}
	if state != "accepted" {
		t.Errorf("decision span attributes %v", s.Attributes)
	}
	// A stale decision is a conflict.
	rec = h.do("POST", "/v1/reviews/tr1/decision", moderatorToken, decisionJSON("rejected", 1, ""))
	if rec.Code != http.StatusConflict {
		t.Fatalf("stale decision: %d", rec.Code)
	}
	if spans := exp.GetSpans(); len(spans) != 2 || spans[1].Status.Code.String() != "Error" {
		t.Errorf("stale decision spans %v", spans)
	}
}
