package domain

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Compact bodies (schema 3). The events every review writes (Submitted,
// AttemptStarted, AttemptTimedOut, FindingReceived, Escalated) are stored
// as a JSON array of their fields in a fixed order rather than as an
// object, without the review ID (the stream names it), times as integer
// nanoseconds since the Unix epoch (UTC) and SHA-256 digests as the
// unpadded base64url of their 32 bytes:
//
//	Submitted        [content_class, content_type, payload_digest, payload_bytes, policy_digest, submitted_at, deadline, submitted_by?]
//	AttemptStarted   [attempt, attempt_timeout_ms, remaining_budget_ms, started_at, provider?, shadows?]
//	AttemptTimedOut  [attempt, classification, elapsed_ms, at, detail?, retry_after_ms?]
//	FindingReceived  [attempt, state, reasons, source, elapsed_ms, received_at]
//	Escalated        [reason, state, attempts, at, detail?]
//
// A trailing field marked ? is left out when it and every field after it
// are empty. Fields are only ever added at the end: a reader ignores
// elements past those it knows, as it ignores unknown members of an
// object. An event with a field the form cannot hold as it is (a time
// that is zero, not UTC or out of the nanosecond range, a digest not of
// the sha256:<hex> form, a Submitted with its policy inline, another
// review's ID) is stored in the canonical form, an object, as every event
// of another type is. Either form decodes to the same event, and a
// compact body takes a quarter to a half of the canonical one's bytes.

// EncodeStored returns the body e is stored with in the stream of review
// reviewID: compact when its type and fields allow, canonical
// (EncodeEvent) otherwise.
func EncodeStored(reviewID string, e Event) ([]byte, error) {
	if b, ok := encodeCompact(reviewID, e); ok {
		return b, nil
	}
	return EncodeEvent(e)
}

// IsCompact reports whether a stored body is in the compact form.
func IsCompact(data []byte) bool { return len(data) > 0 && data[0] == '[' }

// DecodeStored rebuilds an event of review reviewID from its type name
// and stored body, in either form. A compact body takes its review ID
// from reviewID; a canonical one holds its own.
func DecodeStored(reviewID, typ string, data []byte) (Event, error) {
	if !IsCompact(data) {
		return DecodeEvent(typ, data)
	}
	e, err := decodeCompact(reviewID, typ, data)
	if err != nil {
		return nil, fmt.Errorf("decode %s: compact body: %v: %w", typ, err, ErrCorruptHistory)
	}
	return e, nil
}

func encodeCompact(reviewID string, e Event) ([]byte, bool) {
	if !plainString(reviewID) {
		return nil, false // the stream's name gives it back as it is, not as JSON would
	}
	w := compactWriter{b: make([]byte, 0, 128)}
	w.b = append(w.b, '[')
	switch e := e.(type) {
	case Submitted:
		if e.ReviewID != reviewID || e.Policy != (PolicySnapshot{}) || e.PolicyDigest == "" {
			return nil, false
		}
		w.str(e.ContentClass)
		w.str(e.ContentType)
		w.digest(e.PayloadDigest)
		w.int(int64(e.PayloadBytes))
		w.digest(e.PolicyDigest)
		w.time(e.SubmittedAt)
		w.time(e.Deadline)
		if e.SubmittedBy != "" {
			w.str(e.SubmittedBy)
		}
	case AttemptStarted:
		if e.ReviewID != reviewID {
			return nil, false
		}
		w.int(int64(e.Attempt))
		w.int(e.AttemptTimeoutMS)
		w.int(e.RemainingBudgetMS)
		w.time(e.StartedAt)
		if e.Provider != "" || len(e.Shadows) > 0 {
			w.str(e.Provider)
		}
		if len(e.Shadows) > 0 {
			w.strs(e.Shadows)
		}
	case AttemptTimedOut:
		if e.ReviewID != reviewID {
			return nil, false
		}
		w.int(int64(e.Attempt))
		w.str(string(e.Classification))
		w.int(e.ElapsedMS)
		w.time(e.At)
		if e.Detail != "" || e.RetryAfterMS != 0 {
			w.str(e.Detail)
		}
		if e.RetryAfterMS != 0 {
			w.int(e.RetryAfterMS)
		}
	case FindingReceived:
		if e.ReviewID != reviewID {
			return nil, false
		}
		w.int(int64(e.Attempt))
		w.str(string(e.State))
		w.strs(e.Reasons)
		w.str(e.Source)
		w.int(e.ElapsedMS)
		w.time(e.ReceivedAt)
	case Escalated:
		if e.ReviewID != reviewID {
			return nil, false
		}
		w.str(string(e.Reason))
		w.str(string(e.State))
		w.int(int64(e.Attempts))
		w.time(e.At)
		if e.Detail != "" {
			w.str(e.Detail)
		}
	default:
		return nil, false
	}
	if w.refused {
		return nil, false
	}
	return append(w.b, ']'), true
}

func decodeCompact(reviewID, typ string, data []byte) (Event, error) {
	r := compactReader{b: data}
	r.open()
	var e Event
	switch typ {
	case TypeSubmitted:
		s := Submitted{ReviewID: reviewID}
		s.ContentClass = r.str()
		s.ContentType = r.str()
		s.PayloadDigest = r.digest()
		s.PayloadBytes = r.intn()
		s.PolicyDigest = r.digest()
		s.SubmittedAt = r.time()
		s.Deadline = r.time()
		if r.more() {
			s.SubmittedBy = r.str()
		}
		e = s
	case TypeAttemptStarted:
		a := AttemptStarted{ReviewID: reviewID}
		a.Attempt = r.intn()
		a.AttemptTimeoutMS = r.int()
		a.RemainingBudgetMS = r.int()
		a.StartedAt = r.time()
		if r.more() {
			a.Provider = r.str()
		}
		if r.more() {
			if a.Shadows = r.strs(); len(a.Shadows) == 0 {
				a.Shadows = nil // as the canonical form leaves an empty list out
			}
		}
		e = a
	case TypeAttemptTimedOut:
		a := AttemptTimedOut{ReviewID: reviewID}
		a.Attempt = r.intn()
		a.Classification = Classification(r.str())
		a.ElapsedMS = r.int()
		a.At = r.time()
		if r.more() {
			a.Detail = r.str()
		}
		if r.more() {
			a.RetryAfterMS = r.int()
		}
		e = a
	case TypeFindingReceived:
		f := FindingReceived{ReviewID: reviewID}
		f.Attempt = r.intn()
		f.State = Decision(r.str())
		f.Reasons = r.strs()
		f.Source = r.str()
		f.ElapsedMS = r.int()
		f.ReceivedAt = r.time()
		e = f
	case TypeEscalated:
		x := Escalated{ReviewID: reviewID}
		x.Reason = EscalationReason(r.str())
		x.State = State(r.str())
		x.Attempts = r.intn()
		x.At = r.time()
		if r.more() {
			x.Detail = r.str()
		}
		e = x
	default:
		return nil, fmt.Errorf("type %q has no compact form", typ)
	}
	r.close()
	if r.err != nil {
		return nil, r.err
	}
	return e, nil
}

// compactWriter appends the elements of a compact body; refused is set
// when a field cannot be held as it is.
type compactWriter struct {
	b       []byte
	n       int
	refused bool
}

func (w *compactWriter) sep() {
	if w.n > 0 {
		w.b = append(w.b, ',')
	}
	w.n++
}

func (w *compactWriter) int(v int64) {
	w.sep()
	w.b = strconv.AppendInt(w.b, v, 10)
}

// str writes s as encoding/json does (invalid UTF-8 replaced, HTML
// characters escaped), so that it reads back as the canonical form's.
func (w *compactWriter) str(s string) {
	w.sep()
	if plainString(s) {
		w.b = append(append(append(w.b, '"'), s...), '"')
		return
	}
	q, _ := json.Marshal(s) // a string always marshals
	w.b = append(w.b, q...)
}

// strs writes a list of strings; null for nil, as encoding/json does.
func (w *compactWriter) strs(ss []string) {
	w.sep()
	if ss == nil {
		w.b = append(w.b, "null"...)
		return
	}
	q, _ := json.Marshal(ss)
	w.b = append(w.b, q...)
}

// time writes t as integer nanoseconds since the Unix epoch: only a
// non-zero UTC time whose nanoseconds fit, which reads back equal.
func (w *compactWriter) time(t time.Time) {
	if _, off := t.Zone(); t.IsZero() || off != 0 || t.Year() < 1678 || t.Year() > 2261 {
		w.refused = true
		return
	}
	w.int(t.UnixNano())
}

const digestPrefix = "sha256:"

// digest writes a "sha256:<64 lowercase hex>" digest as the unpadded
// base64url of its bytes.
func (w *compactWriter) digest(d string) {
	h, ok := strings.CutPrefix(d, digestPrefix)
	raw, err := hex.DecodeString(h)
	if !ok || err != nil || len(raw) != 32 || hex.EncodeToString(raw) != h {
		w.refused = true
		return
	}
	w.sep()
	w.b = append(w.b, '"')
	w.b = base64.RawURLEncoding.AppendEncode(w.b, raw)
	w.b = append(w.b, '"')
}

// plainString reports whether s is printable ASCII that encoding/json
// writes as it is between quotes.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// compactReader reads the elements of a compact body in order; the first
// fault is kept in err and every read after it gives zero values.
type compactReader struct {
	b   []byte
	i   int
	n   int // elements read
	err error
}

var errCompactSyntax = errors.New("not a compact body")

func (r *compactReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf(format, args...)
	}
}

func (r *compactReader) ws() {
	for r.i < len(r.b) {
		switch r.b[r.i] {
		case ' ', '\t', '\n', '\r':
			r.i++
		default:
			return
		}
	}
}

func (r *compactReader) open() {
	r.ws()
	if r.i >= len(r.b) || r.b[r.i] != '[' {
		r.err = errCompactSyntax
		return
	}
	r.i++
}

// more reports whether another element follows.
func (r *compactReader) more() bool {
	if r.err != nil {
		return false
	}
	r.ws()
	return r.i < len(r.b) && r.b[r.i] != ']'
}

// next moves to the next element, which must be there.
func (r *compactReader) next() bool {
	if r.err != nil {
		return false
	}
	r.ws()
	if r.n > 0 {
		if r.i >= len(r.b) || r.b[r.i] != ',' {
			r.fail("element %d missing", r.n+1)
			return false
		}
		r.i++
		r.ws()
	}
	if r.i >= len(r.b) || r.b[r.i] == ']' {
		r.fail("element %d missing", r.n+1)
		return false
	}
	r.n++
	return true
}

// close reads the end of the array: elements past those read (fields of a
// later release) are skipped once the whole body is checked to be JSON.
func (r *compactReader) close() {
	if r.err != nil {
		return
	}
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == ',' {
		var rest []json.RawMessage
		if err := json.Unmarshal(r.b, &rest); err != nil {
			r.fail("%v", err)
		}
		return
	}
	if r.i >= len(r.b) || r.b[r.i] != ']' {
		r.fail("element %d: syntax", r.n+1)
		return
	}
	r.i++
	r.ws()
	if r.i != len(r.b) {
		r.fail("data after the array")
	}
}

func (r *compactReader) int() int64 {
	if !r.next() {
		return 0
	}
	start := r.i
	if r.i < len(r.b) && r.b[r.i] == '-' {
		r.i++
	}
	digits := r.i
	for r.i < len(r.b) && r.b[r.i] >= '0' && r.b[r.i] <= '9' {
		r.i++
	}
	if r.i == digits || (r.b[digits] == '0' && r.i-digits > 1) {
		r.fail("element %d: not an integer", r.n)
		return 0
	}
	v, err := strconv.ParseInt(string(r.b[start:r.i]), 10, 64)
	if err != nil {
		r.fail("element %d: %v", r.n, err)
	}
	return v
}

// intn reads an integer that must fit an int.
func (r *compactReader) intn() int {
	v := r.int()
	if int64(int(v)) != v {
		r.fail("element %d: %d out of range", r.n, v)
	}
	return int(v)
}

func (r *compactReader) str() string {
	if !r.next() {
		return ""
	}
	return r.token()
}

// token reads the string token at the reader's place.
func (r *compactReader) token() string {
	if r.i >= len(r.b) || r.b[r.i] != '"' {
		r.fail("element %d: not a string", r.n)
		return ""
	}
	start := r.i
	for r.i++; r.i < len(r.b); r.i++ {
		switch c := r.b[r.i]; {
		case c == '"':
			s := r.b[start+1 : r.i]
			r.i++
			if utf8.Valid(s) {
				return string(s)
			}
			return r.unquote(start)
		case c == '\\' || c < 0x20:
			return r.unquote(start)
		}
	}
	r.fail("element %d: unterminated string", r.n)
	return ""
}

// unquote reads the string token at start as encoding/json does: escapes,
// invalid UTF-8 replaced.
func (r *compactReader) unquote(start int) string {
	end := start + 1
	for end < len(r.b) && r.b[end] != '"' {
		if r.b[end] == '\\' {
			end++
		}
		end++
	}
	if end >= len(r.b) {
		r.fail("element %d: unterminated string", r.n)
		return ""
	}
	var s string
	if err := json.Unmarshal(r.b[start:end+1], &s); err != nil {
		r.fail("element %d: %v", r.n, err)
	}
	r.i = end + 1
	return s
}

// strs reads a list of strings, or null (nil).
func (r *compactReader) strs() []string {
	if !r.next() {
		return nil
	}
	if string(r.b[r.i:min(r.i+4, len(r.b))]) == "null" {
		r.i += 4
		return nil
	}
	if r.b[r.i] != '[' {
		r.fail("element %d: not a list", r.n)
		return nil
	}
	r.i++
	out := []string{}
	r.ws()
	if r.i < len(r.b) && r.b[r.i] == ']' {
		r.i++
		return out
	}
	for r.err == nil {
		out = append(out, r.token())
		r.ws()
		switch {
		case r.i < len(r.b) && r.b[r.i] == ']':
			r.i++
			return out
		case r.i < len(r.b) && r.b[r.i] == ',':
			r.i++
			r.ws()
		default:
			r.fail("element %d: a list without its end", r.n)
		}
	}
	return nil
}

func (r *compactReader) time() time.Time {
	ns := r.int()
	if r.err != nil {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func (r *compactReader) digest() string {
	s := r.str()
	if r.err != nil {
		return ""
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(raw) != 32 || base64.RawURLEncoding.EncodeToString(raw) != s {
		r.fail("element %d: not a digest", r.n)
		return ""
	}
	return digestPrefix + hex.EncodeToString(raw)
}
