// Package esdbfake is an in-process stand-in for the streams gRPC API of
// EventStoreDB/KurrentDB, for tests of code that uses esdbstore: the real
// client talks to it over a local TCP port.
//
// It follows the server's documented rules (expected-revision checks,
// idempotency by event ID within a stream, reads of $all inclusive of their
// position, subscriptions exclusive of it) and writes records of its own
// ($-prefixed types in $-streams) into $all, as a real server does. It is
// no evidence of how a real server behaves; docs/esdbstore.md says what
// only a real server shows.
package esdbfake

import (
	"context"
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	api "github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Server answers the client's streams gRPC API (append, stream and $all
// reads, $all subscriptions) in memory. Idempotency compares event IDs
// only, not content. The zero value is ready for Start.
type Server struct {
	api.UnimplementedStreamsServer

	// DenyAll refuses $all reads as a server does for a user outside
	// $admins and $ops.
	DenyAll bool
	// Inclusive starts subscriptions at their position instead of after it.
	Inclusive bool
	// Gate, when set, is called by every append before it takes the
	// server's lock, and the function it returns when the append is
	// answered.
	Gate func() (done func())

	mu      sync.Mutex
	log     []record
	streams map[string][]int // indexes into log
	appends int
	changed chan struct{} // closed and replaced on every write
}

type record struct {
	stream   string
	revision uint64
	id       uuid.UUID
	typ      string
	data     []byte
	meta     []byte
	created  time.Time
	pos      uint64 // commit and prepare position
}

// Start serves f on a local port until the test ends and returns a
// connection string for it (esdb://127.0.0.1:port?tls=false&...).
func (f *Server) Start(t testing.TB) string {
	t.Helper()
	f.streams = make(map[string][]int)
	f.changed = make(chan struct{})
	f.system("$$$settings", "$metadata")
	l, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	api.RegisterStreamsServer(srv, f)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(l)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return "esdb://" + l.Addr().String() + "?tls=false&maxDiscoverAttempts=1&gossipTimeout=2"
}

// write appends records under f.mu and wakes subscribers.
func (f *Server) write(stream string, typ string, id uuid.UUID, data, meta []byte) record {
	r := record{
		stream:   stream,
		revision: uint64(len(f.streams[stream])),
		id:       id,
		typ:      typ,
		data:     data,
		meta:     meta,
		created:  time.Now(),
		pos:      uint64(len(f.log)+1) * 128,
	}
	f.streams[stream] = append(f.streams[stream], len(f.log))
	f.log = append(f.log, r)
	close(f.changed)
	f.changed = make(chan struct{})
	return r
}

// System writes a record of the server's own (a $-prefixed type in a
// $-stream) into $all, as a real server does now and then.
func (f *Server) System(stream, typ string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.system(stream, typ)
}

// system writes a record of the server's own; f.mu is held.
func (f *Server) system(stream, typ string) {
	f.write(stream, typ, uuid.New(), []byte(`{}`), nil)
}

func (f *Server) Append(as api.Streams_AppendServer) error {
	first, err := as.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "options first")
	}
	stream := string(opts.GetStreamIdentifier().GetStreamName())
	var proposed []*api.AppendReq_ProposedMessage
	for {
		req, err := as.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		proposed = append(proposed, req.GetProposedMessage())
	}
	if f.Gate != nil {
		defer f.Gate()()
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	idx := f.streams[stream]
	exists := len(idx) > 0
	current := int64(len(idx)) - 1

	// from is the revision after which the append goes when the
	// condition names one; -2 for Any and StreamExists.
	from := int64(-2)
	switch e := opts.GetExpectedStreamRevision().(type) {
	case *api.AppendReq_Options_NoStream:
		from = -1
	case *api.AppendReq_Options_Revision:
		from = int64(e.Revision)
	case *api.AppendReq_Options_StreamExists:
		if !exists {
			return as.SendAndClose(f.wrongExpected(exists, current))
		}
	}
	switch {
	case from == -2:
		// Best effort for Any: the same IDs found in the stream are a repeat.
		if rev, ok := f.repeat(idx, proposed); ok {
			return as.SendAndClose(f.success(stream, rev, len(proposed)))
		}
	case from > current:
		return as.SendAndClose(f.wrongExpected(exists, current))
	case from < current:
		if f.matches(idx, from+1, proposed) {
			return as.SendAndClose(f.success(stream, uint64(from)+uint64(len(proposed)), len(proposed)))
		}
		return as.SendAndClose(f.wrongExpected(exists, current))
	}
	var last record
	for _, p := range proposed {
		id, err := esdb.ParseUUIDFromInt64(p.GetId().GetStructured().GetMostSignificantBits(), p.GetId().GetStructured().GetLeastSignificantBits())
		if err != nil {
			return status.Error(codes.InvalidArgument, "event id")
		}
		last = f.write(stream, p.GetMetadata()["type"], id, p.GetData(), p.GetCustomMetadata())
	}
	if f.appends++; f.appends%3 == 0 {
		f.system("$stats-127.0.0.1:2113", "$statsCollected")
	}
	return as.SendAndClose(f.success(stream, last.revision, len(proposed)))
}

// matches reports whether the stream's events from revision start on carry
// the proposed IDs, in order.
func (f *Server) matches(idx []int, start int64, proposed []*api.AppendReq_ProposedMessage) bool {
	if start < 0 || int(start)+len(proposed) > len(idx) {
		return false
	}
	for i, p := range proposed {
		if f.log[idx[int(start)+i]].id != protoID(p.GetId()) {
			return false
		}
	}
	return true
}

func (f *Server) repeat(idx []int, proposed []*api.AppendReq_ProposedMessage) (uint64, bool) {
	first := protoID(proposed[0].GetId())
	for i, at := range idx {
		if f.log[at].id == first && f.matches(idx, int64(i), proposed) {
			return uint64(i + len(proposed) - 1), true
		}
	}
	return 0, false
}

// success answers with the stream's revision after the append and, like
// the server, the position of the write: here the first event's, which is
// not the last event's position when there are several.
func (f *Server) success(stream string, last uint64, n int) *api.AppendResp {
	pos := f.log[f.streams[stream][int(last)+1-n]].pos
	return &api.AppendResp{Result: &api.AppendResp_Success_{Success: &api.AppendResp_Success{
		CurrentRevisionOption: &api.AppendResp_Success_CurrentRevision{CurrentRevision: last},
		PositionOption:        &api.AppendResp_Success_Position{Position: &api.AppendResp_Position{CommitPosition: pos, PreparePosition: pos}},
	}}}
}

func (f *Server) wrongExpected(exists bool, current int64) *api.AppendResp {
	w := &api.AppendResp_WrongExpectedVersion{ExpectedRevisionOption: &api.AppendResp_WrongExpectedVersion_ExpectedAny{ExpectedAny: &shared.Empty{}}}
	if exists {
		w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: uint64(current)}
	} else {
		w.CurrentRevisionOption = &api.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
	}
	return &api.AppendResp{Result: &api.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}}
}

func (f *Server) Read(req *api.ReadReq, rs api.Streams_ReadServer) error {
	opts := req.GetOptions()
	if s := opts.GetStream(); s != nil {
		return f.readStream(opts, s, rs)
	}
	if f.DenyAll {
		return status.Error(codes.PermissionDenied, "access denied to $all")
	}
	if opts.GetSubscription() != nil {
		return f.subscribe(opts, rs)
	}
	return f.readAll(opts, rs)
}

func (f *Server) readStream(opts *api.ReadReq_Options, s *api.ReadReq_Options_StreamOptions, rs api.Streams_ReadServer) error {
	f.mu.Lock()
	idx := f.streams[string(s.GetStreamIdentifier().GetStreamName())]
	var out []record
	if len(idx) > 0 {
		backwards := opts.GetReadDirection() == api.ReadReq_Options_Backwards
		start := int64(0)
		switch r := s.GetRevisionOption().(type) {
		case *api.ReadReq_Options_StreamOptions_Revision:
			start = int64(min(r.Revision, uint64(len(idx))))
		case *api.ReadReq_Options_StreamOptions_End:
			start = int64(len(idx)) - 1
		}
		for i := start; i >= 0 && i < int64(len(idx)) && uint64(len(out)) < opts.GetCount(); {
			out = append(out, f.log[idx[i]])
			if backwards {
				i--
			} else {
				i++
			}
		}
	}
	f.mu.Unlock()
	if len(idx) == 0 {
		return rs.Send(&api.ReadResp{Content: &api.ReadResp_StreamNotFound_{StreamNotFound: &api.ReadResp_StreamNotFound{StreamIdentifier: s.GetStreamIdentifier()}}})
	}
	return sendAll(rs, out)
}

func (f *Server) readAll(opts *api.ReadReq_Options, rs api.Streams_ReadServer) error {
	all := opts.GetAll()
	f.mu.Lock()
	var out []record
	if opts.GetReadDirection() == api.ReadReq_Options_Backwards {
		for i := len(f.log) - 1; i >= 0 && uint64(len(out)) < opts.GetCount(); i-- {
			out = append(out, f.log[i])
		}
	} else {
		from := uint64(0)
		if p := all.GetPosition(); p != nil {
			from = p.GetCommitPosition()
		}
		for _, r := range f.log {
			if r.pos >= from && uint64(len(out)) < opts.GetCount() {
				out = append(out, r)
			}
		}
	}
	f.mu.Unlock()
	return sendAll(rs, out)
}

func (f *Server) subscribe(opts *api.ReadReq_Options, rs api.Streams_ReadServer) error {
	keep, err := subscriptionFilter(opts.GetFilter())
	if err != nil {
		return err
	}
	if err := rs.Send(&api.ReadResp{Content: &api.ReadResp_Confirmation{Confirmation: &api.ReadResp_SubscriptionConfirmation{SubscriptionId: uuid.NewString()}}}); err != nil {
		return err
	}
	after := uint64(0)
	if p := opts.GetAll().GetPosition(); p != nil {
		after = p.GetCommitPosition()
	} else if opts.GetAll().GetEnd() != nil {
		after = ^uint64(0)
	}
	sent := 0 // records of the log looked at
	for {
		f.mu.Lock()
		batch := append([]record(nil), f.log[sent:]...)
		sent = len(f.log)
		changed := f.changed
		f.mu.Unlock()
		for _, r := range batch {
			if r.pos < after || r.pos == after && !f.Inclusive {
				continue
			}
			if !keep(r) {
				// A real server sends checkpoints while it filters.
				cp := &api.ReadResp_Checkpoint{CommitPosition: r.pos, PreparePosition: r.pos}
				if err := rs.Send(&api.ReadResp{Content: &api.ReadResp_Checkpoint_{Checkpoint: cp}}); err != nil {
					return err
				}
				continue
			}
			if err := sendAll(rs, []record{r}); err != nil {
				return err
			}
		}
		select {
		case <-changed:
		case <-rs.Context().Done():
			return status.FromContextError(rs.Context().Err()).Err()
		}
	}
}

func subscriptionFilter(fo *api.ReadReq_Options_FilterOptions) (func(record) bool, error) {
	if fo == nil {
		return func(record) bool { return true }, nil
	}
	expr, onType := fo.GetEventType(), true
	if expr == nil {
		expr, onType = fo.GetStreamIdentifier(), false
	}
	var re *regexp.Regexp
	if expr.GetRegex() != "" {
		var err error
		if re, err = regexp.Compile(expr.GetRegex()); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
	}
	return func(r record) bool {
		s := r.stream
		if onType {
			s = r.typ
		}
		if re != nil {
			return re.MatchString(s)
		}
		for _, p := range expr.GetPrefix() {
			if strings.HasPrefix(s, p) {
				return true
			}
		}
		return false
	}, nil
}

func sendAll(rs api.Streams_ReadServer, records []record) error {
	for _, r := range records {
		most, least := esdb.UUIDAsInt64(r.id)
		ev := &api.ReadResp_ReadEvent_RecordedEvent{
			Id:               &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{MostSignificantBits: most, LeastSignificantBits: least}}},
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.stream)},
			StreamRevision:   r.revision,
			PreparePosition:  r.pos,
			CommitPosition:   r.pos,
			Metadata: map[string]string{
				"type":         r.typ,
				"content-type": "application/octet-stream",
				// .NET ticks (100 ns) since the Unix epoch, as the server sends.
				"created": strconv.FormatInt(r.created.UnixNano()/100, 10),
			},
			CustomMetadata: r.meta,
			Data:           r.data,
		}
		resp := &api.ReadResp{Content: &api.ReadResp_Event{Event: &api.ReadResp_ReadEvent{
			Event:    ev,
			Position: &api.ReadResp_ReadEvent_CommitPosition{CommitPosition: r.pos},
		}}}
		if err := rs.Send(resp); err != nil {
			return err
		}
	}
	return nil
}

func protoID(id *shared.UUID) uuid.UUID {
	s := id.GetStructured()
	u, _ := esdb.ParseUUIDFromInt64(s.GetMostSignificantBits(), s.GetLeastSignificantBits())
	return u
}
