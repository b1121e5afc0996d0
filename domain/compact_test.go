package domain_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/reviewledger/reviewledger/domain"
)

// compactTypes are the events stored in the compact form.
var compactTypes = []domain.Event{
	domain.Submitted{}, domain.AttemptStarted{}, domain.AttemptTimedOut{}, domain.FindingReceived{}, domain.Escalated{},
}

// The compact bodies of typical events, byte for byte: the form is part
// of what is stored, so a change of it must show here.
func TestCompactWire(t *testing.T) {
	t.Parallel()
	digest := "sha256:" + strings.Repeat("0f", 32)
	for _, tc := range []struct {
		event domain.Event
		body  string
	}{
		{
			domain.Submitted{ReviewID: "rev-1", ContentClass: "caption_suggestion", ContentType: "text/plain",
				PayloadDigest: digest, PayloadBytes: 42, PolicyDigest: digest, SubmittedAt: t0, Deadline: at(30 * time.Second), SubmittedBy: "platform"},
			`["caption_suggestion","text/plain","Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8",42,"Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8",1772366400000000000,1772366430000000000,"platform"]`,
		},
		{
			domain.AttemptStarted{ReviewID: "rev-1", Attempt: 1, AttemptTimeoutMS: 10000, RemainingBudgetMS: 29995, StartedAt: at(5 * time.Millisecond)},
			`[1,10000,29995,1772366400005000000]`,
		},
		{
			domain.AttemptStarted{ReviewID: "rev-1", Attempt: 1, AttemptTimeoutMS: 10000, RemainingBudgetMS: 29995, StartedAt: t0, Shadows: []string{"rival"}},
			`[1,10000,29995,1772366400000000000,"",["rival"]]`,
		},
		{
			domain.AttemptTimedOut{ReviewID: "rev-1", Attempt: 2, Classification: domain.ClassRateLimited, ElapsedMS: 120, RetryAfterMS: 2000, At: t0},
			`[2,"rate_limited",120,1772366400000000000,"",2000]`,
		},
		{
			domain.FindingReceived{ReviewID: "rev-1", Attempt: 1, State: domain.DecisionAccepted, Reasons: []string{}, Source: "response", ElapsedMS: 3, ReceivedAt: t0},
			`[1,"accepted",[],"response",3,1772366400000000000]`,
		},
		{
			domain.Escalated{ReviewID: "rev-1", Reason: domain.ReasonHumanGate, State: domain.StateManualReview, Attempts: 1, At: t0, Detail: "two <approvals>"},
			`["human_gate","manual_review",1,1772366400000000000,"two \u003capprovals\u003e"]`,
		},
	} {
		t.Run(tc.event.EventType(), func(t *testing.T) {
			b, err := domain.EncodeStored("rev-1", tc.event)
			if err != nil || string(b) != tc.body {
				t.Fatalf("stored body = %s, %v\nwant          %s", b, err, tc.body)
			}
			back, err := domain.DecodeStored("rev-1", tc.event.EventType(), b)
			if err != nil || !reflect.DeepEqual(back, tc.event) {
				t.Fatalf("decoded %#v, %v\nwant    %#v", back, err, tc.event)
			}
			canonical, _ := domain.EncodeEvent(tc.event)
			t.Logf("%d bytes, %d canonical (%.0f %%)", len(b), len(canonical), 100*float64(len(b))/float64(len(canonical)))
		})
	}
}

// TestCompactEqualsCanonical: an event of every compact type, each of its
// fields filled at random (a field added to the type is filled too), is
// stored compact and reads back as its canonical body reads; so does an
// event with fields the form cannot hold, stored canonical instead.
func TestCompactEqualsCanonical(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 7))
	for _, proto := range compactTypes {
		for i := range 500 {
			e := randomEvent(rng, reflect.TypeOf(proto), i%5 == 0)
			id := reviewIDOf(e)
			b, err := domain.EncodeStored(id, e)
			if err != nil {
				t.Fatal(err)
			}
			canonical, err := domain.EncodeEvent(e)
			if err != nil {
				t.Fatal(err)
			}
			want, err := domain.DecodeEvent(e.EventType(), canonical)
			if err != nil {
				t.Fatal(err)
			}
			got, err := domain.DecodeStored(id, e.EventType(), b)
			if err != nil {
				t.Fatalf("%s: %v", b, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s\nreads as %#v\nthe canonical %s as %#v", b, got, canonical, want)
			}
			if i%5 != 0 && !domain.IsCompact(b) {
				t.Fatalf("%#v stored canonical: %s", e, b)
			}
		}
	}
}

// TestCompactRefusesWhatItCannotHold: an event whose fields the form
// cannot hold as they are is stored canonical.
func TestCompactRefusesWhatItCannotHold(t *testing.T) {
	t.Parallel()
	digest := "sha256:" + strings.Repeat("ab", 32)
	sub := domain.Submitted{ReviewID: "r", ContentClass: "c", ContentType: "text/plain", PayloadDigest: digest, PolicyDigest: digest, SubmittedAt: t0, Deadline: t0}
	paris := time.FixedZone("CET", 3600)
	for name, tc := range map[string]struct {
		id string
		e  domain.Event
	}{
		"another review's ID":   {"other", sub},
		"a zero time":           {"r", domain.AttemptStarted{ReviewID: "r", Attempt: 1}},
		"a time not in UTC":     {"r", domain.Escalated{ReviewID: "r", At: t0.In(paris)}},
		"a time past 2262":      {"r", domain.FindingReceived{ReviewID: "r", ReceivedAt: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)}},
		"a short digest":        {"r", func() domain.Submitted { s := sub; s.PayloadDigest = "sha256:0f"; return s }()},
		"an upper-case digest":  {"r", func() domain.Submitted { s := sub; s.PolicyDigest = strings.ToUpper(digest); return s }()},
		"no policy digest":      {"r", func() domain.Submitted { s := sub; s.PolicyDigest = ""; return s }()},
		"the policy inline":     {"r", func() domain.Submitted { s := sub; s.Policy = domain.PolicySnapshot{BudgetMS: 1}; return s }()},
		"a type without a form": {"r", domain.Held{ReviewID: "r", By: "mona", At: t0}},
	} {
		b, err := domain.EncodeStored(tc.id, tc.e)
		canonical, _ := domain.EncodeEvent(tc.e)
		if err != nil || !bytes.Equal(b, canonical) {
			t.Errorf("%s: stored %s, %v; want the canonical %s", name, b, err, canonical)
		}
	}
}

// A later release may add fields at the end; this one reads past them.
func TestCompactReadsPastNewerFields(t *testing.T) {
	t.Parallel()
	e, err := domain.DecodeStored("rev-1", domain.TypeFindingReceived, []byte(`[1,"rejected",["spam"],"callback",7,1772366400000000000,{"score":0.9},"x"]`))
	want := domain.FindingReceived{ReviewID: "rev-1", Attempt: 1, State: domain.DecisionRejected, Reasons: []string{"spam"}, Source: "callback", ElapsedMS: 7, ReceivedAt: t0}
	if err != nil || !reflect.DeepEqual(e, domain.Event(want)) {
		t.Fatalf("decoded %#v, %v", e, err)
	}
}

func TestCompactRefusesGarbage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ typ, data string }{
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3]`},
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3,1.5]`},
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3,17723664000000000000000]`},
		{domain.TypeFindingReceived, `[1,"accepted",["a",],"response",3,1]`},
		{domain.TypeFindingReceived, `[1,"accepted",[1],"response",3,1]`},
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3,1`},
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3,1]]`},
		{domain.TypeFindingReceived, `[1,"accepted",[],"response",3,1,}]`},
		{domain.TypeFindingReceived, `[01,"accepted",[],"response",3,1]`},
		{domain.TypeEscalated, `["human_gate","manual_review",1,1,"unterminated]`},
		{domain.TypeSubmitted, `["c","t","not-a-digest",1,"Dw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8PDw8",1,1]`},
		{domain.TypeHeld, `["mona",1]`},
		{"Deleted", `[]`},
	} {
		e, err := domain.DecodeStored("rev-1", tc.typ, []byte(tc.data))
		if !errors.Is(err, domain.ErrCorruptHistory) || e != nil {
			t.Errorf("%s %s: %#v, %v; want ErrCorruptHistory", tc.typ, tc.data, e, err)
		}
	}
}

// FuzzDecodeStored: arbitrary compact bodies never panic the decoder; it
// refuses with ErrCorruptHistory, and what it accepts is stored again in
// a form that reads back the same.
func FuzzDecodeStored(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, proto := range compactTypes {
		e := randomEvent(rng, reflect.TypeOf(proto), false)
		b, _ := domain.EncodeStored(reviewIDOf(e), e)
		f.Add(e.EventType(), b)
	}
	f.Add(domain.TypeFindingReceived, []byte(`[1,"\ud800",null,"x",-0,0]`))
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		if !domain.IsCompact(data) {
			return // a canonical body: FuzzDecodeEvent's
		}
		e, err := domain.DecodeStored("rev-1", typ, data)
		if err != nil {
			if !errors.Is(err, domain.ErrCorruptHistory) || e != nil {
				t.Fatalf("DecodeStored = %#v, %v; want nil and ErrCorruptHistory", e, err)
			}
			return
		}
		again, err := domain.EncodeStored("rev-1", e)
		if err != nil {
			t.Fatal(err)
		}
		back, err := domain.DecodeStored("rev-1", typ, again)
		if err != nil || !reflect.DeepEqual(back, e) {
			t.Fatalf("%s read as %#v, stored again as %s, read as %#v, %v", data, e, again, back, err)
		}
	})
}

// BenchmarkDecodeStored decodes the bodies every review writes, compact
// and canonical, in the same run.
func BenchmarkDecodeStored(b *testing.B) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, proto := range compactTypes {
		e := randomEvent(rng, reflect.TypeOf(proto), false)
		id := reviewIDOf(e)
		compact, _ := domain.EncodeStored(id, e)
		canonical, _ := domain.EncodeEvent(e)
		for name, body := range map[string][]byte{"compact": compact, "canonical": canonical} {
			b.Run(e.EventType()+"/"+name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := domain.DecodeStored(id, e.EventType(), body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

func reviewIDOf(e domain.Event) string {
	return reflect.ValueOf(e).FieldByName("ReviewID").String()
}

// randomEvent fills every field of an event of type typ at random: times
// in UTC to the nanosecond, digests of the sha256 form, strings of
// anything (escapes, invalid UTF-8), lists nil, empty or not. With odd
// set, one field takes a value the compact form cannot hold.
func randomEvent(rng *rand.Rand, typ reflect.Type, odd bool) domain.Event {
	v := reflect.New(typ).Elem()
	timeType := reflect.TypeOf(time.Time{})
	for i := range typ.NumField() {
		f, sf := v.Field(i), typ.Field(i)
		switch {
		case sf.Name == "Policy":
			continue // stored apart, named by PolicyDigest
		case sf.Name == "ReviewID":
			f.SetString(fmt.Sprintf("rev-%d", rng.IntN(1000))) // IDs are checked on submit: ValidateReviewID
		case strings.HasSuffix(sf.Name, "Digest"):
			var raw [32]byte
			for j := range raw {
				raw[j] = byte(rng.IntN(256))
			}
			f.SetString(fmt.Sprintf("sha256:%x", raw))
		case f.Type() == timeType:
			f.Set(reflect.ValueOf(time.Unix(rng.Int64N(1<<33), rng.Int64N(1e9)).UTC()))
		case f.Kind() == reflect.String:
			f.SetString(randomString(rng))
		case f.Kind() == reflect.Int || f.Kind() == reflect.Int64:
			f.SetInt(rng.Int64N(1<<40) - 1<<20)
		case f.Kind() == reflect.Slice && f.Type().Elem().Kind() == reflect.String:
			switch n := rng.IntN(4); n {
			case 0: // nil
			default:
				s := make([]string, n-1)
				for j := range s {
					s[j] = randomString(rng)
				}
				f.Set(reflect.ValueOf(s))
			}
		default:
			panic(fmt.Sprintf("randomEvent: no filler for %s.%s (%s)", typ.Name(), sf.Name, f.Type()))
		}
	}
	if odd {
		for i := range typ.NumField() {
			if f := v.Field(i); f.Type() == timeType {
				f.Set(reflect.ValueOf(time.Time{}))
				break
			}
		}
	}
	return v.Interface().(domain.Event)
}

func randomString(rng *rand.Rand) string {
	pieces := []string{"", "a", "policy-7", `"`, `\`, "<&>", "é", "\u2028", "\xff", "\t", "rev 1", "日本"}
	var sb strings.Builder
	for range rng.IntN(4) {
		sb.WriteString(pieces[rng.IntN(len(pieces))])
	}
	return sb.String()
}
