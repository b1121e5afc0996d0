package engine

import (
	"context"
	"sync/atomic"

	"github.com/reviewledger/reviewledger/api/engine/provider"
	"github.com/reviewledger/reviewledger/domain"
)

// instant answers every attempt with an accepting finding.
type instant struct{ calls atomic.Int64 }

func (p *instant) Call(_ context.Context, req provider.Request) provider.Result {
	p.calls.Add(1)
	return provider.Result{Outcome: provider.OutcomeFinding, Finding: domain.Finding{ReviewID: req.ReviewID, Attempt: req.Attempt, State: domain.DecisionAccepted}}
}
