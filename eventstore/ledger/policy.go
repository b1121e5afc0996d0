package ledger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
)

// PolicyStreamPrefix begins the name of the stream that holds one policy
// snapshot: the prefix and the hex of its SHA-256 digest. A schema 2
// Submitted names its snapshot by digest; the snapshot is written once, in
// a stream of its own, before the first Submitted that names it, so it is
// stored in every backend whenever such a Submitted is.
const PolicyStreamPrefix = "policy-"

// TypePolicySnapshot is the type of the one event of a policy stream: its
// body is the snapshot's canonical bytes (domain.PolicySnapshot.Canonical).
const TypePolicySnapshot = "PolicySnapshot"

// ErrPolicyMissing: a Submitted names a policy snapshot that is not stored.
var ErrPolicyMissing = errors.New("policy snapshot not stored")

// PolicyStreamName returns the stream of the snapshot with digest
// "sha256:<hex>".
func PolicyStreamName(digest string) string {
	return PolicyStreamPrefix + strings.TrimPrefix(digest, "sha256:")
}

// Policies stores policy snapshots by digest and resolves the digests of
// schema 2 Submitted events, keeping every snapshot it wrote or verified
// in memory (the distinct snapshots of a ledger are few: one per class and
// policy change). It is safe for concurrent use.
type Policies struct {
	store eventstore.Store
	mu    sync.RWMutex
	known map[string]domain.PolicySnapshot
}

// NewPolicies returns the policy snapshots of store.
func NewPolicies(store eventstore.Store) *Policies {
	return &Policies{store: store, known: make(map[string]domain.PolicySnapshot)}
}

func (p *Policies) cached(digest string) (domain.PolicySnapshot, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	s, ok := p.known[digest]
	return s, ok
}

func (p *Policies) keep(digest string, s domain.PolicySnapshot) {
	p.mu.Lock()
	p.known[digest] = s
	p.mu.Unlock()
}

// Put stores s unless it is stored already and returns its digest. When it
// returns without error the snapshot is durable.
func (p *Policies) Put(ctx context.Context, s domain.PolicySnapshot) (string, error) {
	body := s.Canonical()
	digest := domain.PolicyDigest(body)
	if _, ok := p.cached(digest); ok {
		return digest, nil
	}
	stream := PolicyStreamName(digest)
	_, err := p.store.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: eventstore.NoStream,
		Events: []eventstore.EventData{{ID: uuid.Must(uuid.NewV7()).String(), Type: TypePolicySnapshot, Data: body, Metadata: []byte(`{"v":2}`)}}})
	if errors.Is(err, eventstore.ErrWrongExpectedVersion) {
		_, err = p.Get(ctx, digest) // stored before: it must be the same snapshot
	} else if err != nil {
		err = fmt.Errorf("store policy snapshot %s: %w", digest, err)
	}
	if err != nil {
		return "", err
	}
	p.keep(digest, s)
	return digest, nil
}

// Get returns the snapshot stored under digest, checked against it. A
// snapshot not stored is ErrPolicyMissing, one whose bytes do not hash to
// its digest domain.ErrCorruptHistory; both match domain.ErrCorruptHistory.
func (p *Policies) Get(ctx context.Context, digest string) (domain.PolicySnapshot, error) {
	if s, ok := p.cached(digest); ok {
		return s, nil
	}
	recs, err := p.store.ReadStream(ctx, PolicyStreamName(digest), 0)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return domain.PolicySnapshot{}, fmt.Errorf("policy snapshot %s: %w: %w", digest, ErrPolicyMissing, domain.ErrCorruptHistory)
	}
	if err != nil {
		return domain.PolicySnapshot{}, fmt.Errorf("read policy snapshot %s: %w", digest, err)
	}
	rec := recs[0]
	var s domain.PolicySnapshot
	if rec.Type != TypePolicySnapshot || domain.PolicyDigest(rec.Data) != digest || json.Unmarshal(rec.Data, &s) != nil || !strings.HasPrefix(digest, "sha256:") {
		return domain.PolicySnapshot{}, fmt.Errorf("policy snapshot %s: stored bytes do not hash to it (altered): %w", digest, domain.ErrCorruptHistory)
	}
	p.keep(digest, s)
	return s, nil
}

// resolve fills in the policy of a Submitted that names it by digest.
func (p *Policies) resolve(ctx context.Context, e domain.Event) (domain.Event, error) {
	s, ok := e.(domain.Submitted)
	if !ok || s.PolicyDigest == "" {
		return e, nil
	}
	pol, err := p.Get(ctx, s.PolicyDigest)
	if err != nil {
		return nil, err
	}
	s.Policy = pol
	return s, nil
}

// Decode decodes a stored event of review reviewID as domain.DecodeStored
// does and fills in the policy a Submitted of schema 2 or later names by
// digest.
func (p *Policies) Decode(ctx context.Context, reviewID, typ string, data []byte) (domain.Event, error) {
	e, err := domain.DecodeStored(reviewID, typ, data)
	if err != nil {
		return nil, err
	}
	return p.resolve(ctx, e)
}

// stored returns the body a Submitted is stored with: its policy by
// digest (the snapshot stored by Put before).
func stored(e domain.Event) domain.Event {
	s, ok := e.(domain.Submitted)
	if !ok {
		return e
	}
	s.PolicyDigest = s.Policy.Digest()
	s.Policy = domain.PolicySnapshot{}
	return s
}
