package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/reviewledger/reviewledger/api/queuefeed"
	"github.com/reviewledger/reviewledger/eventstore"
)

// Feed is the stream of manual-queue changes (*queuefeed.Feed).
type Feed interface {
	// Open says a stream is open until the returned func is called: the
	// feed reads the ledger only while one is. Called before Head and
	// Next.
	Open() (closeStream func())
	// Head waits until the feed follows the ledger and returns where it
	// has read to.
	Head(ctx context.Context) (eventstore.Position, error)
	// Next returns at most max changes after pos, where to ask from next,
	// and a channel closed once more may be there.
	Next(ctx context.Context, after eventstore.Position, max int) ([]queuefeed.Change, eventstore.Position, <-chan struct{}, error)
}

var _ Feed = (*queuefeed.Feed)(nil)

// Queue stream settings.
const (
	// QueueStreamHeartbeat is how often a quiet stream sends a comment.
	QueueStreamHeartbeat = 15 * time.Second
	// queueStreamPage bounds the changes a stream takes at a time: what
	// one connection holds in memory.
	queueStreamPage = 100
	// queueStreamRetry is the reconnection delay suggested to clients, ms.
	queueStreamRetry = 2000
)

// queueEvents is GET /v1/manual-queue/events: server-sent events of the
// manual queue's changes, from the ledger's global order, resumable with
// Last-Event-ID.
func (s *Server) queueEvents(c echo.Context) error {
	if s.deps.Feed == nil {
		return fmt.Errorf("queue events: no feed configured: %w", ErrNotReady)
	}
	ctx := c.Request().Context()
	pos, resumed, err := lastEventID(c)
	if err != nil {
		return err
	}
	closeStream := s.deps.Feed.Open()
	defer closeStream()
	if !resumed {
		if pos, err = s.feedHead(ctx); err != nil {
			return err
		}
	}
	w := c.Response()
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s.metrics.streams.Inc()
	defer s.metrics.streams.Dec()
	st := &sseStream{c: c, rc: http.NewResponseController(w), beat: s.cfg.QueueHeartbeat}
	// A stream reads nothing more from the client: the server's read
	// timeout must not bind it (nor its write timeout: write extends it).
	_ = st.rc.SetReadDeadline(time.Time{})
	if err := st.write(fmt.Sprintf("retry: %d\n\n", queueStreamRetry)); err != nil {
		return nil
	}
	if err := s.streamQueue(ctx, st, pos); err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "queue stream ended", "request_id", requestID(c), "error", err.Error())
	}
	return nil // the status is sent: nothing more to answer
}

// lastEventID reads the resume position: the Last-Event-ID header, or the
// last_event_id query parameter.
func lastEventID(c echo.Context) (eventstore.Position, bool, error) {
	id := c.Request().Header.Get("Last-Event-ID")
	if id == "" {
		id = c.QueryParam("last_event_id")
	}
	if id == "" {
		return eventstore.Position{}, false, nil
	}
	pos, err := queuefeed.ParseID(id)
	if err != nil {
		return pos, false, fieldError("Last-Event-ID", err.Error())
	}
	return pos, true, nil
}

// streamQueue sends changes after pos until the client or the server goes.
func (s *Server) streamQueue(ctx context.Context, st *sseStream, pos eventstore.Position) error {
	ready := false
	beat := time.NewTicker(st.beat)
	defer beat.Stop()
	for {
		changes, next, wake, err := s.deps.Feed.Next(ctx, pos, queueStreamPage)
		if err != nil {
			return err
		}
		for _, ch := range changes {
			if err := st.change(ch); err != nil {
				return err
			}
		}
		pos = next
		if len(changes) > 0 {
			beat.Reset(st.beat)
		}
		if !ready && len(changes) == 0 {
			ready = true
			if err := st.write(fmt.Sprintf("event: ready\ndata: {\"position\":%q}\n\n", queuefeed.FormatID(pos))); err != nil {
				return err
			}
		}
		if len(changes) > 0 && isClosed(wake) {
			continue
		}
		select {
		case <-wake:
		case <-beat.C:
			if err := st.write(": heartbeat\n\n"); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		case <-s.closing:
			return nil
		}
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sseStream writes server-sent events, flushing each and extending the
// write deadline past the next heartbeat.
type sseStream struct {
	c    echo.Context
	rc   *http.ResponseController
	beat time.Duration
}

func (st *sseStream) change(ch queuefeed.Change) error {
	data, err := json.Marshal(ch)
	if err != nil {
		return err
	}
	return st.write(fmt.Sprintf("id: %s\nevent: %s\ndata: %s\n\n", queuefeed.FormatID(ch.Position), ch.Type, data))
}

func (st *sseStream) write(text string) error {
	_ = st.rc.SetWriteDeadline(time.Now().Add(2*st.beat + 10*time.Second))
	if _, err := st.c.Response().Write([]byte(text)); err != nil {
		return err
	}
	if err := st.rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

// feedHead waits for the feed to follow the ledger and returns its head.
// A feed that never can (a ledger that cannot tell its head) answers 503;
// the wait ends, too, when the server shuts down.
func (s *Server) feedHead(ctx context.Context) (eventstore.Position, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	pos, err := s.deps.Feed.Head(ctx)
	if errors.Is(err, queuefeed.ErrNoHead) {
		return pos, fmt.Errorf("queue events: %w: %w", err, ErrNotReady)
	}
	return pos, err
}
