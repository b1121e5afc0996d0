// Package audit checks that review histories in the ledger are intact and
// replays them for auditors.
//
// Verify walks every review stream (or one), checks its hash chain
// (ledger.History.Verify), that it still rebuilds into a valid review, and
// that it still reaches what witnesses last saw of it: the audit anchors
// written by earlier verifications and, when wired, the review_summary read
// model. The chain shows an event altered, removed or reordered in the
// middle of a stream; the witnesses show a removed tail, a removed stream,
// and a history rewritten with a recomputed chain. With public keys, the
// signed checkpoints are checked too, and with an archive of them kept
// outside the database (the witness), that the database still holds what
// they signed, which a restore to an earlier point does not. Replay
// renders one review's timeline and the state rebuilt from it.
package audit

import (
	"bytes"
	"cmp"
	"context"
	"crypto/ed25519"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/reviewledger/reviewledger/domain"
	"github.com/reviewledger/reviewledger/eventstore"
	"github.com/reviewledger/reviewledger/eventstore/ledger"
)

// ErrDamaged is wrapped by Report.Err when any review is damaged.
var ErrDamaged = errors.New("ledger history damaged")

// Histories reads review streams (*ledger.Ledger).
type Histories interface {
	// History reads a review's stored events in revision order;
	// domain.ErrReviewNotFound when there are none, an error wrapping
	// domain.ErrCorruptHistory when one cannot be decoded.
	History(ctx context.Context, reviewID string) (*ledger.History, error)
}

// BatchHistories reads many histories at once (*ledger.Ledger): the
// verifier checks a whole ledger in batches of reviews, a read per batch.
type BatchHistories interface {
	// Histories calls each, in the order of reviewIDs, with the index of
	// each and what History returns for it; an error of each stops it.
	Histories(ctx context.Context, reviewIDs []string, each func(i int, h *ledger.History, err error) error) error
}

// Mark is what a witness last saw of a review: its stream reached Revision,
// and the event there had Hash (empty when the witness keeps no hash);
// Digest, when set, is the ViewDigest of the events up to Revision.
type Mark struct {
	Revision uint64
	Hash     string
	Digest   string
}

// Witness remembers how far review streams reached.
type Witness interface {
	// Name identifies the witness in reports ("anchor", "review_summary").
	Name() string
	// Marks returns the marks of the given reviews, or of every review the
	// witness knows when ids is nil.
	Marks(ctx context.Context, ids []string) (map[string]Mark, error)
}

// Anchors is a witness the verifier also writes: after a verification,
// every intact review's head is anchored.
type Anchors interface {
	Witness
	// Advance records the marks, never moving an anchor backwards.
	Advance(ctx context.Context, marks map[string]Mark, at time.Time) error
}

// Verifier checks review histories.
type Verifier struct {
	Store     eventstore.Store // lists the streams
	Histories Histories
	// Witnesses are consulted for every review; Anchors (when set) is one
	// and is advanced after the check.
	Witnesses []Witness
	Anchors   Anchors
	// PublicKeys, when set, are the audit keys whose signed checkpoints
	// (read from Checkpoints) are checked, and whose every signed head is
	// a witness no database write can forge.
	PublicKeys  []ed25519.PublicKey
	Checkpoints CheckpointReader
	// Archive, when set with PublicKeys, is a copy of the signed
	// checkpoints kept outside the database (the witness directory): its
	// checkpoints are checked as the stored ones are, every one must be
	// in the database as archived, and every head they signed must be in
	// the ledger as signed. A database restored to an earlier point, a
	// review removed with its checkpoints, and a truncated stream are
	// named by it.
	Archive ArchiveReader
	Now     func() time.Time // default time.Now
	// Workers is how many reviews (batches of BatchSize reviews when
	// Histories is a BatchHistories) are checked at once: each reads its
	// streams and then hashes and replays them, so that reads overlap
	// checks and the checks use every core. Default 4 per core.
	Workers int
	// BatchSize is how many reviews a BatchHistories reads at once;
	// default 256.
	BatchSize int
	// ChunkSize is how many reviews are checked before their anchors are
	// advanced (while the next chunk is checked); default 65,536.
	ChunkSize int
}

// CheckpointReader reads the stored signed checkpoints (PGCheckpoints).
type CheckpointReader interface {
	// All returns every stored checkpoint in seq order.
	All(ctx context.Context) ([]Stored, error)
}

// Damage is one damaged review.
type Damage struct {
	ReviewID string
	// Revision is where the damage was found.
	Revision uint64
	Reason   string
}

func (d Damage) String() string {
	return fmt.Sprintf("review %s: revision %d: %s", d.ReviewID, d.Revision, d.Reason)
}

// Report is the outcome of a verification.
type Report struct {
	Reviews int // reviews checked
	Events  int // events checked
	Damaged []Damage
	// Anchored is how many intact reviews are anchored at their head
	// after the check; those already anchored there are not written
	// again.
	Anchored int

	// With public keys: Checkpoints is how many signed checkpoints
	// verified, Latest the newest of them (nil when none), Broken each
	// checkpoint that is not what was signed (altered, removed, out of
	// chain, or signed with another key), and Unsigned how many events
	// checked come after every signed head of their review (appended since
	// the last checkpoint, or never signed).
	Checkpoints int
	Latest      *Checkpoint
	Broken      []string
	Unsigned    int
	// With an Archive: how many of its checkpoints verified, the seqs of
	// those the database does not hold (Broken names each), and how many
	// stored checkpoints come after the archive's last (not archived or
	// not copied yet: no damage, but not witnessed).
	Archived    int
	Lost        []int64
	Unwitnessed int
}

// Err is nil when nothing is damaged, and otherwise names every damaged
// review and broken checkpoint and wraps ErrDamaged.
func (r Report) Err() error {
	if len(r.Damaged) == 0 && len(r.Broken) == 0 {
		return nil
	}
	lines := make([]string, 0, len(r.Damaged)+len(r.Broken))
	for _, d := range r.Damaged {
		lines = append(lines, d.String())
	}
	lines = append(lines, r.Broken...)
	return fmt.Errorf("%d of %d reviews damaged, %d signed checkpoints broken:\n%s: %w",
		len(DamagedIDs(r.Damaged)), r.Reviews, len(r.Broken), strings.Join(lines, "\n"), ErrDamaged)
}

// DamagedIDs returns the distinct review IDs of damages, in order.
func DamagedIDs(ds []Damage) []string {
	var ids []string
	for _, d := range ds {
		if !slices.Contains(ids, d.ReviewID) {
			ids = append(ids, d.ReviewID)
		}
	}
	return ids
}

// Verify checks one review (reviewID not empty) or every review. The error
// is for failures to read; damage is in the report.
//
// The signed checkpoints are read and checked first. The ledger's review
// streams are then listed and checked in chunks of ChunkSize: what every
// witness holds of a chunk's reviews is read while the chunk before is
// checked, and the anchors of a chunk's intact reviews are written while
// the next is checked. Last, the reviews that a witness or a signed
// checkpoint knows but the ledger no longer lists are checked, and the
// side streams. What a verification holds is a few chunks' marks, 8 bytes
// a review listed (idSet), and the signed checkpoints' heads when there
// are public keys: not every review's marks.
func (v *Verifier) Verify(ctx context.Context, reviewID string) (Report, error) {
	if reviewID != "" {
		if err := domain.ValidateReviewID(reviewID); err != nil {
			return Report{}, err
		}
	}
	var rep Report
	signed, err := v.signedMarks(ctx, reviewID, &rep)
	if err != nil {
		return Report{}, err
	}
	streams := &lister{store: v.Store}
	if reviewID != "" {
		err = v.checkPages(ctx, listOf([]string{reviewID}, 1), signed, &rep)
	} else {
		err = v.checkLedger(ctx, streams, signed, &rep)
	}
	if err != nil {
		return rep, err
	}
	if reviewID != "" && rep.Events == 0 && len(rep.Damaged) == 0 && len(rep.Broken) == 0 {
		return rep, fmt.Errorf("review %q: %w", reviewID, domain.ErrReviewNotFound)
	}
	if err := v.checkSides(ctx, reviewID, streams, &rep); err != nil {
		return rep, err
	}
	return rep, nil
}

// checkLedger checks every review the ledger lists, then those it no
// longer lists that a witness or a signed checkpoint knows.
func (v *Verifier) checkLedger(ctx context.Context, streams *lister, signed map[string][]witnessMark, rep *Report) error {
	size := v.chunkSize()
	listed := newIDSet()
	list := func(ctx context.Context, each func(ids []string) error) error {
		return streams.pages(ctx, domain.StreamName(""), size, func(ids []string) error {
			listed.add(ids)
			return each(ids)
		})
	}
	if err := v.checkPages(ctx, list, signed, rep); err != nil {
		return err
	}
	listed.seal()
	gone, err := v.unlisted(ctx, listed, signed)
	if err != nil {
		return err
	}
	return v.checkPages(ctx, listOf(gone, size), signed, rep)
}

func (v *Verifier) chunkSize() int { return cmp.Or(v.ChunkSize, defaultChunkSize) }

// pageLister calls each with the IDs of reviews, a chunk at a time.
type pageLister func(ctx context.Context, each func(ids []string) error) error

// listOf lists ids in chunks of size.
func listOf(ids []string, size int) pageLister {
	return func(_ context.Context, each func(ids []string) error) error {
		for chunk := range slices.Chunk(ids, size) {
			if err := each(chunk); err != nil {
				return err
			}
		}
		return nil
	}
}

// witnesses returns the witnesses consulted: Witnesses, and Anchors when
// it is not among them.
func (v *Verifier) witnesses() []Witness {
	ws := slices.Clone(v.Witnesses)
	if v.Anchors != nil && !slices.Contains(ws, Witness(v.Anchors)) {
		ws = append(ws, v.Anchors)
	}
	return ws
}

// chunk is a chunk of reviews and their marks, read before their streams.
type chunk struct {
	ids   []string
	marks map[string][]witnessMark
}

// checkPages checks the reviews that list gives into rep: the marks of a
// chunk are read (while the chunk before is checked), then the chunk is
// checked (checkChunks).
func (v *Verifier) checkPages(ctx context.Context, list pageLister, signed map[string][]witnessMark, rep *Report) error {
	chunks := make(chan chunk, 1)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(chunks)
		return list(gctx, func(ids []string) error {
			marks, err := v.chunkMarks(gctx, ids, signed)
			if err != nil {
				return err
			}
			select {
			case chunks <- chunk{ids: ids, marks: marks}:
				return nil
			case <-gctx.Done():
				return gctx.Err()
			}
		})
	})
	g.Go(func() error { return v.checkChunks(gctx, chunks, rep) })
	return g.Wait()
}

// chunkMarks returns the marks of the reviews of ids, by review: the
// signed ones, then each witness's in order. The witnesses of a chunk of
// sideBySideFrom reviews or more are read side by side, each on a
// connection of its own; those of fewer one after the other, on one.
func (v *Verifier) chunkMarks(ctx context.Context, ids []string, signed map[string][]witnessMark) (map[string][]witnessMark, error) {
	ws := v.witnesses()
	read := make([]map[string]Mark, len(ws))
	g, gctx := errgroup.WithContext(ctx)
	if len(ids) < sideBySideFrom {
		g.SetLimit(1)
	}
	for i, w := range ws {
		g.Go(func() error {
			ms, err := w.Marks(gctx, ids)
			if err != nil {
				return fmt.Errorf("read %s: %w", w.Name(), err)
			}
			read[i] = ms
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := make(map[string][]witnessMark, len(ids))
	for _, id := range ids {
		ms := slices.Clip(signed[id]) // an append copies it
		for i, w := range ws {
			if mk, ok := read[i][id]; ok {
				ms = append(ms, witnessMark{witness: w.Name(), Mark: mk})
			}
		}
		if len(ms) > 0 {
			out[id] = ms
		}
	}
	return out, nil
}

// sideBySideFrom is the fewest reviews whose witnesses are read side by
// side. A chunk of fewer reads in a few milliseconds, less than a second
// connection takes to open when the pool has one (audit verify --review:
// a server session started is some 15 ms).
const sideBySideFrom = 1024

// checkChunks checks the chunks it receives into rep, and advances the
// anchors of each chunk's intact reviews while the next chunk is checked
// (one Advance at a time, so that they never wait for each other's rows).
func (v *Verifier) checkChunks(ctx context.Context, chunks <-chan chunk, rep *Report) error {
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	wait := noAdvance // the Advance of the chunk before
	for c := range chunks {
		checked, err := v.checkAll(ctx, c.ids, c.marks)
		if err != nil {
			return errors.Join(err, wait())
		}
		heads := v.tally(c.ids, checked, c.marks, rep)
		if err := wait(); err != nil {
			return err
		}
		wait = noAdvance
		if v.Anchors == nil || len(heads) == 0 {
			continue
		}
		rep.Anchored += len(heads)
		if moved := unanchored(heads, c.marks, v.Anchors.Name()); len(moved) > 0 {
			wait = v.advance(ctx, moved, now())
		}
	}
	return wait()
}

func noAdvance() error { return nil }

// advance starts advancing the anchors to moved and returns what waits
// for it to end.
func (v *Verifier) advance(ctx context.Context, moved map[string]Mark, at time.Time) (wait func() error) {
	done := make(chan error, 1)
	go func() { done <- v.Anchors.Advance(ctx, moved, at) }()
	return func() error {
		if err := <-done; err != nil {
			return fmt.Errorf("advance audit anchors: %w", err)
		}
		return nil
	}
}

// defaultChunkSize is how many reviews Verify checks before it anchors
// them, by default.
const defaultChunkSize = 65536

// tally adds what the check of the reviews of ids found to rep, and
// returns the heads of the intact ones.
func (v *Verifier) tally(ids []string, checked []checked, marks map[string][]witnessMark, rep *Report) map[string]Mark {
	heads := make(map[string]Mark)
	for i, id := range ids {
		rep.Reviews++
		damage, head, n := checked[i].damage, checked[i].head, checked[i].events
		rep.Events += n
		if len(v.PublicKeys) > 0 {
			rep.Unsigned += unsignedEvents(n, marks[id])
		}
		if len(damage) > 0 {
			rep.Damaged = append(rep.Damaged, damage...)
			continue
		}
		if head != nil {
			heads[id] = *head
		}
	}
	return heads
}

// unanchored returns the heads that the anchors witness (named anchors)
// does not already hold, among the marks read before the check.
func unanchored(heads map[string]Mark, marks map[string][]witnessMark, anchors string) map[string]Mark {
	moved := make(map[string]Mark, len(heads))
	for id, head := range heads {
		if !slices.ContainsFunc(marks[id], func(m witnessMark) bool { return m.witness == anchors && m.Mark == head }) {
			moved[id] = head
		}
	}
	return moved
}

// checked is what the check of one review found.
type checked struct {
	damage []Damage
	head   *Mark
	events int
}

// checkAll checks every review of ids, Workers at once (Workers batches
// of BatchSize when Histories reads many at once), and returns what each
// check found, in the order of ids; the first error stops them.
func (v *Verifier) checkAll(ctx context.Context, ids []string, marks map[string][]witnessMark) ([]checked, error) {
	out := make([]checked, len(ids))
	policies := ledger.NewPolicies(v.Store) // read from the store, not from a cache of what was written
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(cmp.Or(v.Workers, 4*runtime.GOMAXPROCS(0)))
	batch, ok := v.Histories.(BatchHistories)
	if !ok {
		for i, id := range ids {
			g.Go(func() error {
				h, err := v.Histories.History(ctx, id)
				return v.checkInto(ctx, &out[i], id, h, err, marks[id], policies)
			})
		}
		return out, g.Wait()
	}
	size := cmp.Or(v.BatchSize, 256)
	for start := 0; start < len(ids); start += size {
		chunk := ids[start:min(start+size, len(ids))]
		g.Go(func() error {
			return batch.Histories(ctx, chunk, func(i int, h *ledger.History, err error) error {
				id := chunk[i]
				return v.checkInto(ctx, &out[start+i], id, h, err, marks[id], policies)
			})
		})
	}
	return out, g.Wait()
}

// checkInto checks review id, read as h (or err), into c.
func (v *Verifier) checkInto(ctx context.Context, c *checked, id string, h *ledger.History, err error, marks []witnessMark, policies *ledger.Policies) error {
	c.damage, c.head, c.events, err = v.check(ctx, id, h, err, marks, policies)
	return err
}

// unsignedEvents counts the events of a review of n events that come after
// its newest signed head.
func unsignedEvents(n int, marks []witnessMark) int {
	covered := 0
	for _, m := range marks {
		if m.signed {
			covered = max(covered, int(m.Revision)+1)
		}
	}
	return max(0, n-covered)
}

// signedMarks checks the stored signed checkpoints with the public keys,
// recording in rep what does not hold, and returns the heads of those that
// verify as marks, by review (only reviewID's when it is set). Nothing is
// checked without public keys.
func (v *Verifier) signedMarks(ctx context.Context, reviewID string, rep *Report) (map[string][]witnessMark, error) {
	if len(v.PublicKeys) == 0 {
		return nil, nil
	}
	if v.Checkpoints == nil {
		return nil, errors.New("verify signed checkpoints: no checkpoint store")
	}
	keys := make(map[string]ed25519.PublicKey, len(v.PublicKeys))
	for _, k := range v.PublicKeys {
		keys[KeyID(k)] = k
	}
	stored, err := v.Checkpoints.All(ctx)
	if err != nil {
		return nil, err
	}
	if len(stored) == 0 {
		rep.Broken = append(rep.Broken, "no signed checkpoint is stored: nothing to check the ledger against (none signed yet, or all removed)")
		if v.Archive == nil {
			return nil, nil
		}
	}
	broken := func(format string, args ...any) {
		rep.Broken = append(rep.Broken, fmt.Sprintf(format, args...))
	}
	out := make(map[string][]witnessMark)
	verified := make(map[int64][]byte) // the bodies of those that verified, by seq
	for _, c := range verifyChain(stored, keys, "", broken) {
		rep.Checkpoints++
		latest := c.Checkpoint
		rep.Latest = &latest
		verified[c.Seq] = c.body
		witness := fmt.Sprintf("signed checkpoint #%d", c.Seq)
		for _, h := range c.Heads {
			if reviewID == "" || h.ReviewID == reviewID {
				out[h.ReviewID] = append(out[h.ReviewID], witnessMark{witness: witness, signed: true,
					Mark: Mark{Revision: h.Revision, Hash: h.Hash, Digest: h.Digest}})
			}
		}
	}
	if v.Archive != nil {
		if err := v.archivedMarks(ctx, reviewID, keys, stored, verified, rep, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// archivedMarks checks the archive's checkpoints like the stored ones,
// and that the database holds each as archived, recording in rep what
// does not hold. The heads of those the database does not hold verified
// (missing, different, or broken there) are added to out, the newest per
// review, so that the ledger is checked against them: the heads of the
// others are the database's own marks already.
func (v *Verifier) archivedMarks(ctx context.Context, reviewID string, keys map[string]ed25519.PublicKey,
	stored []Stored, verified map[int64][]byte, rep *Report, out map[string][]witnessMark) error {
	name := v.Archive.Name()
	archived, err := v.Archive.All(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", name, err)
	}
	broken := func(format string, args ...any) {
		rep.Broken = append(rep.Broken, fmt.Sprintf(format, args...))
	}
	var last int64
	if len(archived) > 0 {
		last = archived[len(archived)-1].Seq
	}
	inDB := make(map[int64][]byte, len(stored))
	for _, st := range stored {
		inDB[st.Seq] = st.Body
		if st.Seq > last {
			rep.Unwitnessed++
		}
	}
	if len(archived) == 0 {
		broken("the %s holds no signed checkpoint: nothing to check the database against", name)
		return nil
	}
	newest := make(map[string]witnessMark)
	for _, c := range verifyChain(archived, keys, " in the "+name, broken) {
		rep.Archived++
		if body, ok := verified[c.Seq]; ok && bytes.Equal(body, c.body) {
			continue
		}
		var heads []Head
		for _, h := range c.Heads {
			if reviewID == "" || h.ReviewID == reviewID {
				heads = append(heads, h)
			}
		}
		if reviewID != "" && len(heads) == 0 {
			continue
		}
		switch body, ok := inDB[c.Seq]; {
		case !ok:
			rep.Lost = append(rep.Lost, c.Seq)
			broken("checkpoint #%d: in the %s but not in the database (restored to an earlier point, or removed); it signed %d reviews", c.Seq, name, len(c.Heads))
		case !bytes.Equal(body, c.body):
			broken("checkpoint #%d: the database holds another checkpoint under this seq than the %s (signed again after a restore, or replaced)", c.Seq, name)
		}
		witness := fmt.Sprintf("signed checkpoint #%d in the %s", c.Seq, name)
		for _, h := range heads {
			newest[h.ReviewID] = witnessMark{witness: witness, signed: true, Mark: Mark{Revision: h.Revision, Hash: h.Hash, Digest: h.Digest}}
		}
	}
	for id, m := range newest {
		out[id] = append(out[id], m)
	}
	return nil
}

// verifiedCheckpoint is a checkpoint whose signature and chain verified.
type verifiedCheckpoint struct {
	Checkpoint
	body []byte
}

// verifyChain checks stored checkpoints' signatures with keys and their
// chain from #1, calling broken for each that does not hold (where, when
// set, follows the seq in its line: " in the witness …"), and returns
// those that verify.
func verifyChain(stored []Stored, keys map[string]ed25519.PublicKey, where string, broken func(string, ...any)) []verifiedCheckpoint {
	var (
		out      []verifiedCheckpoint
		expect   int64  = 1
		prevBody []byte // the body of the checkpoint before, when it verified
	)
	for _, st := range stored {
		if st.Seq > expect {
			broken("checkpoint #%d%s: checkpoints #%d to #%d are missing (removed)", st.Seq, where, expect, st.Seq-1)
			prevBody = nil
		}
		expect = st.Seq + 1
		c, err := ParseCheckpoint(st.Body)
		if err != nil {
			broken("checkpoint #%d%s: cannot be read (altered): %v", st.Seq, where, err)
			prevBody = nil
			continue
		}
		key, ok := keys[c.KeyID]
		switch {
		case c.Seq != st.Seq:
			broken("checkpoint #%d%s: its signed body says #%d (altered)", st.Seq, where, c.Seq)
		case !ok:
			broken("checkpoint #%d%s: signed with key %s, which is not among the public keys given", st.Seq, where, c.KeyID)
		case !ed25519.Verify(key, st.Body, st.Signature):
			broken("checkpoint #%d%s: the signature does not verify (altered)", st.Seq, where)
		case c.Seq == 1 && c.Prev != "":
			broken("checkpoint #1%s: names a checkpoint before it (the first ones were removed)", where)
		case prevBody != nil && c.Prev != Digest(prevBody):
			broken("checkpoint #%d%s: the checkpoint stored before it is not the one it signed (#%d altered or replaced)", st.Seq, where, st.Seq-1)
		default:
			out = append(out, verifiedCheckpoint{Checkpoint: c, body: st.Body})
			prevBody = st.Body
			continue
		}
		prevBody = nil
	}
	return out
}

// witnessMark is a mark and the witness it came from.
type witnessMark struct {
	witness string
	signed  bool // from a verified signed checkpoint
	Mark
}

// check verifies one review, read as h (or the error err); it returns the
// damage found, the head to anchor when intact, and the number of events
// read.
func (v *Verifier) check(ctx context.Context, id string, h *ledger.History, err error, marks []witnessMark, policies *ledger.Policies) ([]Damage, *Mark, int, error) {
	switch {
	case errors.Is(err, domain.ErrReviewNotFound):
		var ds []Damage
		for _, m := range marks {
			ds = append(ds, Damage{ReviewID: id, Revision: 0,
				Reason: fmt.Sprintf("every event removed (%s saw revision %d)", m.witness, m.Revision)})
		}
		return ds, nil, 0, nil
	case errors.Is(err, domain.ErrCorruptHistory):
		return []Damage{{ReviewID: id, Revision: revisionOf(err), Reason: "an event cannot be read (altered): " + err.Error()}}, nil, 0, nil
	case err != nil:
		return nil, nil, 0, err
	}
	n := len(h.Events)
	var chain *ledger.ChainError
	if err := h.Verify(); errors.As(err, &chain) {
		return []Damage{{ReviewID: id, Revision: chain.Revision, Reason: chain.Reason}}, nil, n, nil
	} else if err != nil {
		return nil, nil, n, err
	}
	if _, err := h.Snapshot(); err != nil {
		return []Damage{{ReviewID: id, Revision: uint64(n - 1), Reason: "the history does not rebuild into a valid review: " + err.Error()}}, nil, n, nil
	}
	if s, ok := h.Events[0].Event.(domain.Submitted); ok && s.PolicyDigest != "" {
		if _, err := policies.Get(ctx, s.PolicyDigest); errors.Is(err, domain.ErrCorruptHistory) {
			return []Damage{{ReviewID: id, Revision: 0, Reason: "the policy snapshot its Submitted names is missing or altered: " + err.Error()}}, nil, n, nil
		} else if err != nil {
			return nil, nil, n, err
		}
	}
	last := h.Events[n-1]
	var ds []Damage
	for _, m := range marks {
		switch {
		case m.Revision > last.Revision:
			ds = append(ds, Damage{ReviewID: id, Revision: last.Revision + 1,
				Reason: fmt.Sprintf("events after revision %d removed (%s saw revision %d)", last.Revision, m.witness, m.Revision)})
		case m.Hash != "" && h.Events[m.Revision].Metadata.Hash != m.Hash:
			ds = append(ds, Damage{ReviewID: id, Revision: m.Revision,
				Reason: fmt.Sprintf("history rewritten: the event at revision %d no longer has the hash %s (%s)", m.Revision, short(m.Hash), m.witness)})
		case m.Digest != "" && ViewDigest(h, m.Revision) != m.Digest:
			ds = append(ds, Damage{ReviewID: id, Revision: m.Revision,
				Reason: fmt.Sprintf("recorded_at, request_id or schema of an event up to revision %d altered (%s)", m.Revision, m.witness)})
		}
	}
	if len(ds) > 0 {
		return ds, nil, n, nil
	}
	return nil, &Mark{Revision: last.Revision, Hash: last.Metadata.Hash}, n, nil
}

// revisionOf digs the revision out of a decode error, 0 when it has none.
func revisionOf(err error) uint64 {
	var rev uint64
	msg := err.Error()
	if i := strings.Index(msg, "revision "); i >= 0 {
		_, _ = fmt.Sscanf(msg[i:], "revision %d", &rev)
	}
	return rev
}

func short(hash string) string {
	if len(hash) > 12 {
		return hash[:12] + "…"
	}
	return hash
}
