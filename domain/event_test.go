package domain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// wireEvents is one fully populated event of every type with its stored
// body. The bodies pin the JSON field names: events are forever, so a
// change here is a change to every stored history.
var wireEvents = []struct {
	event domain.Event
	json  string
}{
	{
		domain.Submitted{
			ReviewID: "rev-1", ContentClass: "caption_suggestion", ContentType: "text/vtt", PayloadDigest: "sha256:00ff",
			PayloadBytes: 42, Policy: automated().Snapshot(), SubmittedAt: t0, Deadline: at(30 * time.Second), SubmittedBy: "platform",
		},
		`{"review_id":"rev-1","content_class":"caption_suggestion","content_type":"text/vtt","payload_digest":"sha256:00ff","payload_bytes":42,` +
			`"policy":{"budget_ms":30000,"attempt_timeout_ms":10000,"max_attempts":3,"backoff_initial_ms":100,"backoff_max_ms":2000,"backoff_jitter_ms":75,"on_exhaustion":"manual_review","human_gate":false,"priority":1,"approvals":1},` +
			`"submitted_at":"2026-03-01T12:00:00Z","deadline":"2026-03-01T12:00:30Z","submitted_by":"platform"}`,
	},
	{
		domain.AttemptStarted{ReviewID: "rev-1", Attempt: 2, AttemptTimeoutMS: 10000, RemainingBudgetMS: 19500, StartedAt: at(10500 * time.Millisecond)},
		`{"review_id":"rev-1","attempt":2,"attempt_timeout_ms":10000,"remaining_budget_ms":19500,"started_at":"2026-03-01T12:00:10.5Z"}`,
	},
	{
		domain.AttemptTimedOut{ReviewID: "rev-1", Attempt: 2, Classification: domain.ClassRateLimited, ElapsedMS: 120, Detail: "429", RetryAfterMS: 2000, At: at(10620 * time.Millisecond)},
		`{"review_id":"rev-1","attempt":2,"classification":"rate_limited","elapsed_ms":120,"detail":"429","retry_after_ms":2000,"at":"2026-03-01T12:00:10.62Z"}`,
	},
	{
		domain.FindingReceived{ReviewID: "rev-1", Attempt: 3, State: domain.DecisionRejected, Reasons: []string{"profanity", "spam"}, Source: domain.SourceCallback, ElapsedMS: 900, ReceivedAt: at(13 * time.Second)},
		`{"review_id":"rev-1","attempt":3,"state":"rejected","reasons":["profanity","spam"],"source":"callback","elapsed_ms":900,"received_at":"2026-03-01T12:00:13Z"}`,
	},
	{
		domain.Escalated{ReviewID: "rev-1", Reason: domain.ReasonAttemptsExhausted, State: domain.StateManualReview, Attempts: 3, Detail: "after 3 attempts", At: at(31 * time.Second)},
		`{"review_id":"rev-1","reason":"attempts_exhausted","state":"manual_review","attempts":3,"detail":"after 3 attempts","at":"2026-03-01T12:00:31Z"}`,
	},
	{
		domain.ManualApprovalRecorded{ReviewID: "rev-1", State: domain.DecisionAccepted, Moderator: "alice", Note: "fine", At: at(time.Minute)},
		`{"review_id":"rev-1","state":"accepted","moderator":"alice","note":"fine","at":"2026-03-01T12:01:00Z"}`,
	},
	{
		domain.ManualDecisionRecorded{ReviewID: "rev-1", State: domain.DecisionAccepted, Moderator: "bob", Note: "agreed", Approvers: []string{"alice", "bob"}, At: at(2 * time.Minute)},
		`{"review_id":"rev-1","state":"accepted","moderator":"bob","note":"agreed","approvers":["alice","bob"],"at":"2026-03-01T12:02:00Z"}`,
	},
	{
		domain.ConflictingCompletionRecorded{
			ReviewID: "rev-1", ContentClass: "caption_suggestion", Attempt: 2, Source: domain.SourceCallback,
			Reason: domain.ConflictAttemptNotInFlight, State: domain.DecisionAccepted, ReviewState: domain.StatePending,
			ReviewVersion: 4, Detail: "attempt is not the one in flight", At: at(21 * time.Second),
		},
		`{"review_id":"rev-1","content_class":"caption_suggestion","attempt":2,"source":"callback","reason":"attempt_not_in_flight",` +
			`"state":"accepted","review_state":"pending","review_version":4,"detail":"attempt is not the one in flight","at":"2026-03-01T12:00:21Z"}`,
	},
	{
		domain.Requeued{ReviewID: "rev-1", By: "mia", Note: "provider back", Round: 2, Deadline: at(time.Hour + 30*time.Second), BudgetMS: 30000, At: at(time.Hour)},
		`{"review_id":"rev-1","by":"mia","note":"provider back","round":2,"deadline":"2026-03-01T13:00:30Z","budget_ms":30000,"at":"2026-03-01T13:00:00Z"}`,
	},
	{
		domain.Claimed{ReviewID: "rev-1", Moderator: "mia", ClaimedAt: at(time.Minute), ExpiresAt: at(11 * time.Minute)},
		`{"review_id":"rev-1","moderator":"mia","claimed_at":"2026-03-01T12:01:00Z","expires_at":"2026-03-01T12:11:00Z"}`,
	},
	{
		domain.ClaimReleased{ReviewID: "rev-1", Moderator: "mia", By: "system", Reason: domain.ReleaseExpired, At: at(11 * time.Minute)},
		`{"review_id":"rev-1","moderator":"mia","by":"system","reason":"expired","at":"2026-03-01T12:11:00Z"}`,
	},
	{
		domain.Held{ReviewID: "rev-1", By: "mia", Note: "waiting for legal", At: at(time.Minute)},
		`{"review_id":"rev-1","by":"mia","note":"waiting for legal","at":"2026-03-01T12:01:00Z"}`,
	},
	{
		domain.Unheld{ReviewID: "rev-1", By: "sam", At: at(2 * time.Minute)},
		`{"review_id":"rev-1","by":"sam","at":"2026-03-01T12:02:00Z"}`,
	},
}

func TestEventRoundTrip(t *testing.T) {
	t.Parallel()
	seen := make(map[string]bool)
	for _, w := range wireEvents {
		typ := w.event.EventType()
		seen[typ] = true
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			b, err := domain.EncodeEvent(w.event)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != w.json {
				t.Fatalf("stored body =\n%s\nwant\n%s", b, w.json)
			}
			back, err := domain.DecodeEvent(typ, b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back, w.event) {
				t.Fatalf("decoded %#v\nwant    %#v", back, w.event)
			}
		})
	}
	for _, typ := range []string{
		domain.TypeSubmitted, domain.TypeAttemptStarted, domain.TypeAttemptTimedOut, domain.TypeFindingReceived,
		domain.TypeEscalated, domain.TypeManualApprovalRecorded, domain.TypeManualDecisionRecorded,
		domain.TypeConflictingCompletionRecorded, domain.TypeRequeued, domain.TypeClaimed,
		domain.TypeClaimReleased, domain.TypeHeld, domain.TypeUnheld,
	} {
		if !seen[typ] {
			t.Errorf("no round-trip case for %s", typ)
		}
	}
	if len(seen) != 13 {
		t.Errorf("%d distinct type names for 13 event types", len(seen))
	}
}

// TestEventOptionalFields checks that optional fields are left out when
// empty and come back empty.
func TestEventOptionalFields(t *testing.T) {
	t.Parallel()
	e := domain.ManualDecisionRecorded{ReviewID: "rev-1", State: domain.DecisionRejected, Moderator: "alice", At: t0}
	b, err := domain.EncodeEvent(e)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"review_id":"rev-1","state":"rejected","moderator":"alice","at":"2026-03-01T12:00:00Z"}`; string(b) != want {
		t.Fatalf("body = %s, want %s", b, want)
	}
	back, err := domain.DecodeEvent(e.EventType(), b)
	if err != nil || !reflect.DeepEqual(back, domain.Event(e)) {
		t.Fatalf("decoded %#v, %v; want %#v", back, err, e)
	}
}

// TestDecodeEventAcceptsNewerFields checks that a reader ignores fields a
// later schema adds, as events only ever gain fields.
func TestDecodeEventAcceptsNewerFields(t *testing.T) {
	t.Parallel()
	e, err := domain.DecodeEvent(domain.TypeEscalated, []byte(`{"review_id":"rev-1","reason":"cancelled","state":"manual_review","attempts":0,"at":"2026-03-01T12:00:00Z","requested_by":"ops"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := domain.Escalated{ReviewID: "rev-1", Reason: domain.ReasonCancelled, State: domain.StateManualReview, At: t0}
	if e != domain.Event(want) {
		t.Fatalf("decoded %#v, want %#v", e, want)
	}
}

func TestDecodeEventRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, typ, data string
	}{
		{"unknown type", "Deleted", `{"review_id":"rev-1"}`},
		{"empty type", "", `{}`},
		{"type in the wrong case", "submitted", `{"review_id":"rev-1"}`},
		{"Go type path as type", "domain.Submitted", `{"review_id":"rev-1"}`},
		{"empty body", domain.TypeSubmitted, ``},
		{"null body", domain.TypeAttemptStarted, `null`},
		{"array body", domain.TypeEscalated, `[]`},
		{"number body", domain.TypeFindingReceived, `42`},
		{"string body", domain.TypeManualDecisionRecorded, `"accepted"`},
		{"truncated body", domain.TypeSubmitted, `{"review_id":"rev-1"`},
		{"trailing data", domain.TypeAttemptTimedOut, `{"review_id":"rev-1"} {}`},
		{"wrong field type", domain.TypeAttemptStarted, `{"attempt":"one"}`},
		{"attempt out of range", domain.TypeAttemptStarted, `{"attempt":1e400}`},
		{"unparseable time", domain.TypeEscalated, `{"at":"yesterday"}`},
		{"reasons not a list", domain.TypeFindingReceived, `{"reasons":"spam"}`},
		{"policy not an object", domain.TypeSubmitted, `{"policy":3}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, err := domain.DecodeEvent(tc.typ, []byte(tc.data))
			if !errors.Is(err, domain.ErrCorruptHistory) {
				t.Fatalf("DecodeEvent = %#v, %v; want ErrCorruptHistory", e, err)
			}
			if e != nil {
				t.Fatalf("DecodeEvent returned %#v with its error", e)
			}
		})
	}
}

// FuzzDecodeEvent feeds arbitrary stored bodies to the decoder: it never
// panics, refuses with ErrCorruptHistory, and what it accepts re-encodes to
// a body that decodes to the same event and encodes the same again.
func FuzzDecodeEvent(f *testing.F) {
	for _, w := range wireEvents {
		f.Add(w.event.EventType(), []byte(w.json))
	}
	f.Add("Deleted", []byte(`{}`))
	f.Add(domain.TypeSubmitted, []byte(`null`))
	f.Add(domain.TypeFindingReceived, []byte(`{"Review_ID":"a","review_id":"b","reasons":["\xff"],"state":null}`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		e, err := domain.DecodeEvent(typ, data)
		agreesWithEncodingJSON(t, typ, data, e, err)
		if err != nil {
			if !errors.Is(err, domain.ErrCorruptHistory) || e != nil {
				t.Fatalf("DecodeEvent = %#v, %v; want nil and ErrCorruptHistory", e, err)
			}
			return
		}
		if e.EventType() != typ {
			t.Fatalf("decoded a %s from type %s", e.EventType(), typ)
		}
		first, err := domain.EncodeEvent(e)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		again, err := domain.DecodeEvent(typ, first)
		if err != nil {
			t.Fatalf("re-encoded body %s does not decode: %v", first, err)
		}
		second, err := domain.EncodeEvent(again)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("encoding is not stable:\n%s\n%s", first, second)
		}
	})
}

// agreesWithEncodingJSON fails unless what DecodeEvent made of a body of
// a known type is what encoding/json makes of it: DecodeEvent reads
// stored bodies with a faster decoder of the same semantics, and must
// accept the same bodies (objects) and give the same values.
func agreesWithEncodingJSON(t *testing.T, typ string, data []byte, got domain.Event, err error) {
	t.Helper()
	zero, zerr := domain.DecodeEvent(typ, []byte(`{}`))
	if zerr != nil {
		return // not a type of event
	}
	want := reflect.New(reflect.TypeOf(zero))
	werr := json.Unmarshal(data, want.Interface())
	if object := bytes.TrimLeft(data, " \t\r\n"); werr == nil && (len(object) == 0 || object[0] != '{') {
		werr = errors.New("not an object")
	}
	switch {
	case (err == nil) != (werr == nil):
		t.Fatalf("%s %q: DecodeEvent's error %v, encoding/json's %v", typ, data, err, werr)
	case err == nil && !reflect.DeepEqual(got, want.Elem().Interface()):
		t.Fatalf("%s %q: DecodeEvent gave %#v, encoding/json %#v", typ, data, got, want.Elem().Interface())
	}
}

// TestDecodeEventAsEncodingJSON: every stored body of the wire fixtures,
// and bodies no writer of ours makes (names in another case, a name
// twice, unknown names, invalid UTF-8, nulls), decode as encoding/json
// decodes them.
func TestDecodeEventAsEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, w := range wireEvents {
		e, err := domain.DecodeEvent(w.event.EventType(), []byte(w.json))
		agreesWithEncodingJSON(t, w.event.EventType(), []byte(w.json), e, err)
	}
	for _, body := range []string{
		`{"REVIEW_ID":"rev-1","Attempt":2,"state":"accepted"}`,
		`{"review_id":"rev-1","review_id":"rev-2"}`,
		`{"review_id":"rev-1","unknown":{"deep":[1,2,{"x":null}]}}`,
		"{\"review_id\":\"rev-\xff\",\"reasons\":[\"\xfe\"]}",
		`{"review_id":null,"reasons":null,"attempt":null}`,
		`{"reasons":[]}`,
		`{"received_at":"2026-03-01T12:00:00.123456789+01:00"}`,
		`{"attempt":1.0}`,
		`{"attempt":-0}`,
		`  {"review_id":"\u00e9\ud800"}  `,
	} {
		e, err := domain.DecodeEvent(domain.TypeFindingReceived, []byte(body))
		agreesWithEncodingJSON(t, domain.TypeFindingReceived, []byte(body), e, err)
	}
}

// BenchmarkDecodeEvent decodes the stored bodies of the events every
// review writes, with DecodeEvent and, for comparison in the same run,
// with encoding/json.
func BenchmarkDecodeEvent(b *testing.B) {
	for _, w := range wireEvents {
		typ := w.event.EventType()
		switch typ {
		case domain.TypeSubmitted, domain.TypeAttemptStarted, domain.TypeFindingReceived:
		default:
			continue
		}
		body := []byte(w.json)
		b.Run(typ+"/DecodeEvent", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := domain.DecodeEvent(typ, body); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(typ+"/encoding_json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				v := reflect.New(reflect.TypeOf(w.event))
				if err := json.Unmarshal(body, v.Interface()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
