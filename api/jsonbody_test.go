package api

import (
	"reflect"
	"testing"
)

// FuzzDecodeJSON: decodeJSON's quick reading (encoding/json on the body
// as it is, when plainBody allows it) gives exactly what the strict
// member-by-member reading gives, value and error, for every body: flat
// (the submit's, a decision's, a hold's, a requeue's) and with nested
// objects and arrays (the bulk action's).
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{
		`{"review_id":"r1","content_class":"caption_suggestion","content_type":"text/plain","content":"hello"}`,
		` { "review_id" : "r1" , "content" : {"a":[1,2,{"b":"}"}]} , "x": null } `,
		`{"review_id":"r1","review_id":"r2"}`,
		`{"REVIEW_ID":"r1","content_class":"c"}`,
		"{\"review_\u017fd\":\"r1\"}",
		"{\"content_\u212Aind\":\"r1\"}",
		`{"Review_Id":"r1"}`,
		`{"review_id":7,"content_class":"c"}`,
		`{"review_id":"a\"b","content":"\ud800"}`,
		`{"review_id":"r1"} trailing`,
		`{"review_id":"r1",}`,
		`{"a\u0062":"x","review_id":"r"}`,
		`{"content":[1,2,3],"note":"x","items":[{"review_id":"a","expected_version":1}],"filter":{"state":"x"},"dry_run":true,"limit":5}`,
		`{"items":[{"review_id":"a","review_id":"b"}]}`,
		`{"limit":1e400}`, `{"dry_run":tru}`, `{"content":1.5e3}`, `{}`, ` {} `, `{"a":{}}`, `[]`, `null`, ``, `{"a":"\\"}`,
		"{\"content\":\"\xff\"}",
		`{"review_id":"r1","content_class":"c","content":null,"content_encoding":"base64"}`,
		`{"state":"accepted","note":"ok","expected_version":3}`, `{"expected_version":-1}`, `{"expected_version":1e30}`, `{"Note":"x","expected_version":2}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		same(t, body, &submitBody{}, &submitBody{})
		same(t, body, &bulkBody{}, &bulkBody{})
		same(t, body, &decisionBody{}, &decisionBody{})
		same(t, body, &holdBody{}, &holdBody{})
		same(t, body, &requeueBody{}, &requeueBody{})
	})
}

func same[T any](t *testing.T, body []byte, quick, strict *T) {
	t.Helper()
	errQuick, errStrict := decodeJSON(body, quick), decodeStrict(body, strict)
	if (errQuick == nil) != (errStrict == nil) || errQuick != nil && errQuick.Error() != errStrict.Error() {
		t.Fatalf("%q into %T: decodeJSON says %v, the strict reading %v", body, quick, errQuick, errStrict)
	}
	if errQuick == nil && !reflect.DeepEqual(quick, strict) {
		t.Fatalf("%q into %T: decodeJSON reads %+v, the strict reading %+v", body, quick, *quick, *strict)
	}
}

// TestPlainBodyTakesTheQuickReading: the bodies a client sends are read
// quickly, so the quick path is not dead code; the ones encoding/json would
// read differently are not.
func TestPlainBodyTakesTheQuickReading(t *testing.T) {
	bt := typeOf(&submitBody{})
	for _, s := range []string{
		`{"review_id":"r1","content_class":"c","content_type":"text/plain","content":"hello"}`,
		` {"review_id" : "r1", "content": {"a": [1, "]"]}, "extra": 1} `,
		`{}`,
	} {
		if !plainBody([]byte(s), bt) {
			t.Errorf("%s: strict reading, want the quick one", s)
		}
	}
	for _, s := range []string{
		`{"review_id":"r1","review_id":"r2"}`,
		`{"REVIEW_ID":"r1"}`,
		"{\"review_\u017fd\":\"r1\"}",
		`{"content":"\u00e9"}`,
		`{"re\"view":"r1"}`,
		`{"review_id":"r1"} x`,
		"{\"content\":\"\xff\"}",
	} {
		if plainBody([]byte(s), bt) {
			t.Errorf("%s: quick reading, want the strict one", s)
		}
	}
	if typeOf(&struct{ Untagged string }{}).plain {
		t.Error("a struct with an untagged field is taken as plain")
	}
	type inner struct {
		Note string `json:"note"`
	}
	if typeOf(&struct {
		inner
		ID string `json:"id"`
	}{}).plain {
		t.Error("a struct embedding an unexported struct is taken as plain")
	}
}

func BenchmarkDecodeSubmit(b *testing.B) {
	body := []byte(`{"review_id":"bench-1f2e-42","content_class":"caption_suggestion","content_type":"text/plain","content":"bench caption bench-1f2e-42: the quick brown fox jumps over the lazy dog"}`)
	for _, c := range []struct {
		name   string
		decode func([]byte, any) error
	}{{"quick", decodeJSON}, {"strict", decodeStrict}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var v submitBody
				if err := c.decode(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
