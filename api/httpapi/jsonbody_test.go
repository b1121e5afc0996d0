package httpapi

import (
	"bytes"
	stdjson "encoding/json"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json"

	"github.com/reviewledger/reviewledger/domain"
)

// FuzzDecodeJSON: decodeJSON refuses exactly the bodies that break the
// strict rules (strictFault, read here with encoding/json) or that
// encoding/json cannot decode into the struct, and otherwise reads what
// encoding/json reads, for every body whose names encoding/json cannot
// match up to case: flat (the submit's, a decision's, a hold's, a
// requeue's) and with nested objects and arrays (the bulk action's, whose
// unknown members are refused in the body and in its filter). Every
// refusal names a field and is a 400.
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
		`{"items":[{"review_id":"a","review_id":null,"expected_version":1,"expected_version":null}]}`,
		`{"items":[{"review_id":"a","expected_vers":1}]}`,
		`{"items":[{"Review_ID":"a","EXPECTED_VERSION":1}]}`,
		`{"items":[{"review_id":"\udc00"}]}`,
		`{"filter":{"reason":"a","reason":"b"}}`, `{"filter":{"reason":"\ud800"}}`, `{"filter":null,"items":[]}`,
		`{"content":{"a":1,"a":2}}`, `{"content":{"a":"\udc00"}}`, `{"content":["\ud800"]}`, `{"x":"\ud83d\ude00"}`,
		`{"x":"\ud800","y":["\udc00"],"z":{"q":1,"q":2}}`, `{"\ud800":1}`, `{"note":"\udc00"}`,
		`{"limit":1e400}`, `{"dry_run":tru}`, `{"content":1.5e3}`, `{}`, ` {} `, `{"a":{}}`, `[]`, `null`, ``, `{"a":"\\"}`,
		"{\"content\":\"\xff\"}", "{\"x\":{\"y\":\"\xff\"}}",
		`{"review_id":"r1","content_class":"c","content":null,"content_encoding":"base64"}`,
		`{"state":"accepted","note":"ok","expected_version":3}`, `{"expected_version":-1}`, `{"expected_version":1e30}`, `{"Note":"x","expected_version":2}`,
		`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		agrees(t, body, false, func(b []byte, v *submitBody) error { return decodeJSON(b, v) })
		agrees(t, body, true, decodeBulkJSON)
		agrees(t, body, false, func(b []byte, v *decisionBody) error { return decodeJSON(b, v) })
		agrees(t, body, false, func(b []byte, v *holdBody) error { return decodeJSON(b, v) })
		agrees(t, body, false, func(b []byte, v *requeueBody) error { return decodeJSON(b, v) })
	})
}

// agrees checks decode's reading of body against encoding/json's and
// strictFault's; bulk is whether T is the bulk body, whose unknown members
// and filter keys are refused.
func agrees[T any](t *testing.T, body []byte, bulk bool, decode func([]byte, *T) error) {
	t.Helper()
	var got, want T
	err := decode(body, &got)
	var fe *domain.FieldError
	if err != nil && (!errors.As(err, &fe) || fe.Field == "" || !errors.Is(err, ErrInvalidRequest)) {
		t.Fatalf("%q into %T: error %v names no field or is not a 400", body, got, err)
	}
	fault, exact := strictFault(body, jsonNames(reflect.TypeFor[T]()), bulk)
	if fault != "" {
		if err == nil {
			t.Fatalf("%q into %T: accepted, although %s", body, got, fault)
		}
		return
	}
	if !exact {
		return // encoding/json would match a name up to case
	}
	errStd := stdjson.Unmarshal(body, &want)
	if (err == nil) != (errStd == nil) {
		t.Fatalf("%q into %T: decodeJSON says %v, encoding/json %v", body, got, err, errStd)
	}
	if err == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q into %T: decodeJSON reads %+v, encoding/json %+v", body, got, got, want)
	}
}

// jsonNames are the member names of the struct type t's fields.
func jsonNames(t reflect.Type) map[string]bool {
	names := map[string]bool{}
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// strictFault says why body breaks the strict rules (docs/api.md), or
// returns "": it must be valid UTF-8 and one JSON object; in that object,
// a name appears once and holds no unpaired UTF-16 surrogate escape, and
// the string value of a member in known holds none either. Below it
// nothing more is asked, except of a bulk body (bulk): every name of it
// and of its filter is in known or bulkFilter's, and the filter names each
// once. exact is whether every name is lower-case ASCII, so that
// encoding/json, which matches names up to case, matches the same fields
// as an exact match.
func strictFault(body []byte, known map[string]bool, bulk bool) (fault string, exact bool) {
	switch {
	case !utf8.Valid(body):
		return "it is not UTF-8", false
	case !stdjson.Valid(body):
		return "it is not one JSON value", false
	case !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")):
		return "it is not an object", false
	}
	members := topMembers(body)
	seen := map[string]bool{}
	for _, m := range members {
		switch {
		case loneSurrogate(m.rawName):
			return "a name holds an unpaired surrogate escape", false
		case seen[m.name]:
			return "it names " + strconv.Quote(m.name) + " twice", false
		case known[m.name] && m.value[0] == '"' && loneSurrogate(m.value):
			return m.name + " holds an unpaired surrogate escape", false
		case bulk && !known[m.name]:
			return m.name + " is not a member of a bulk body", false
		}
		seen[m.name] = true
		if bulk && m.name == "filter" && m.value[0] == '{' {
			filterKnown := jsonNames(reflect.TypeFor[bulkFilter]())
			inFilter := map[string]bool{}
			for _, k := range topMembers(m.value) {
				if inFilter[k.name] || !filterKnown[k.name] {
					return "the filter names " + strconv.Quote(k.name) + " twice or unknown", false
				}
				inFilter[k.name] = true
			}
		}
	}
	dec := stdjson.NewDecoder(bytes.NewReader(body))
	var objects []bool // whether each open value is an object
	expectName := false
	exact = true
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", exact
		}
		switch tok {
		case stdjson.Delim('{'):
			objects = append(objects, true)
			expectName = true
			continue
		case stdjson.Delim('['):
			objects = append(objects, false)
		case stdjson.Delim('}'), stdjson.Delim(']'):
			objects = objects[:len(objects)-1]
		default:
			if name, ok := tok.(string); ok && expectName {
				exact = exact && !strings.ContainsFunc(name, func(r rune) bool { return r >= utf8.RuneSelf || 'A' <= r && r <= 'Z' })
				expectName = false
				continue
			}
		}
		expectName = len(objects) > 0 && objects[len(objects)-1]
	}
}

// refMember is a member of a JSON object as strictFault reads it.
type refMember struct {
	name    string
	rawName []byte // as sent, quotes included
	value   stdjson.RawMessage
}

// topMembers are the members of object, valid JSON text of an object.
func topMembers(object []byte) []refMember {
	var members []refMember
	dec := stdjson.NewDecoder(bytes.NewReader(object))
	_, _ = dec.Token()
	for dec.More() {
		start := dec.InputOffset()
		tok, _ := dec.Token()
		m := refMember{name: tok.(string), rawName: object[start:dec.InputOffset()]}
		_ = dec.Decode(&m.value)
		members = append(members, m)
	}
	return members
}

// loneSurrogate reports whether the JSON text raw, from a valid JSON
// value, holds a \u escape of a UTF-16 surrogate that is not half of a
// pair.
func loneSurrogate(raw []byte) bool {
	for i := 0; i < len(raw); i++ { // in valid JSON, a backslash starts an escape
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++
			continue
		}
		r := hexRune(raw[i+2 : i+6])
		if utf16.IsSurrogate(r) {
			if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' || utf16.DecodeRune(r, hexRune(raw[i+8:i+12])) == utf8.RuneError {
				return true
			}
			i += 6
		}
		i += 5
	}
	return false
}

func hexRune(b []byte) rune {
	r, _ := strconv.ParseUint(string(b), 16, 16)
	return rune(r)
}

// TestDecodeJSONProblems: the problem of each fault, field and reason, as
// docs/api.md describes them.
func TestDecodeJSONProblems(t *testing.T) {
	const (
		twice    = "appears twice in the body; send each member once"
		notUTF8  = "is not valid UTF-8: the bytes would be replaced, and other content reviewed than was sent (send binary content with content_encoding base64)"
		unpaired = "holds an unpaired UTF-16 surrogate escape"
		badName  = "a member name is not valid UTF-8 text"
	)
	for _, tc := range []struct {
		body          string
		reject        bool
		field, reason string
	}{
		{``, false, "body", "is empty; a JSON object is required"},
		{" \n\t", false, "body", "is empty; a JSON object is required"},
		{`[]`, false, "body", "must be a JSON object"},
		{`null`, false, "body", "must be a JSON object"},
		{`"x"`, false, "body", "must be a JSON object"},
		{`{"review_id":"r1"} trailing`, false, "body", "unexpected data after the JSON object"},
		{`{"review_id":"r1"} {}`, false, "body", "unexpected data after the JSON object"},
		{`x`, false, "body", "malformed JSON: invalid character 'x' at start of value"},
		{"\xff", false, "body", "is not valid UTF-8"},
		{`{"review_id":"r1",}`, false, "body", "malformed JSON: invalid character ',' at start of value after offset 17"},
		{`{"review_id":`, false, "body", `malformed JSON: unexpected EOF within "/review_id" after offset 13`},
		{"{\"review_id\":1 \xff}", false, "body", "is not valid UTF-8"},
		{`{"review_id":"r1","review_id":"r2"}`, false, "review_id", twice},
		{`{"note":1,"note":2}`, false, "note", twice},
		{`{"items":[{"review_id":"a","review_id":"b"}]}`, false, "", ""},
		{`{"content":{"a":1,"a":2}}`, false, "", ""},
		{"{\"content\":\"caf\xe9\"}", false, "content", notUTF8},
		{"{\"extra\":\"\xff\"}", false, "extra", notUTF8},
		{"{\"content\":{\"a\":[\"\xff\"]}}", false, "content", notUTF8},
		{`{"content":"a\ud800b"}`, false, "content", unpaired},
		{`{"content":"\udc00"}`, false, "content", unpaired},
		{`{"content":"\ud83d\ud83d"}`, false, "content", unpaired},
		{`{"note":"\ud83d"}`, false, "note", unpaired},
		{`{"x":["\ud83d"]}`, false, "", ""},
		{`{"x":"\ud83d"}`, false, "", ""},
		{`{"content":{"a":["\udc00"]}}`, false, "", ""},
		{`{"items":[{"review_id":"\udc00"}]}`, false, "", ""},
		{"{\"\xff\":1}", false, "body", badName},
		{`{"a\udc00":1}`, false, "body", badName},
		{"{\"" + strings.Repeat("n", 65) + "\":\"\xff\"}", false, "body", notUTF8},
		{`{"review_id":7,"content":}`, false, "body", `malformed JSON: missing value after object name within "/content" after offset 25`},
		{`{"review_id":7}`, false, "review_id", "must be a JSON string"},
		{`{"expected_version":-1}`, false, "expected_version", "must be a JSON uint64"},
		{`{"limit":1e400}`, false, "limit", "must be a JSON int"},
		{`{"filter":3}`, false, "filter", "must be a JSON struct"},
		{`{"items":[{"review_id":"a"},{"expected_version":"1"}]}`, false, "items[1].expected_version", "must be a JSON uint64"},
		{`{"REVIEW_ID":"r1","Note":1}`, false, "", ""},
		{`{"review_id":"r1","content":"x"}`, true, "", ""},
		{`{"dri_run":true}`, true, "dri_run", "is not a member of this body"},
		{`{"filter":{"contentclass":"c"}}`, true, "filter.contentclass", "is not a member of this body"},
		{`{"items":[{"review_id":"a"},{"expected_vers":1}]}`, true, "", ""},
		{`{"items":[{"Review_ID":"a"}]}`, true, "", ""},
		{`{"0":1}`, true, "0", "is not a member of this body"},
		{`{"dry_run":"yes","x":1}`, true, "dry_run", "must be a JSON bool"},
	} {
		var v struct {
			ReviewID        string             `json:"review_id"`
			Content         stdjson.RawMessage `json:"content"`
			Note            string             `json:"note"`
			ExpectedVersion *uint64            `json:"expected_version"`
			Filter          *bulkFilter        `json:"filter"`
			Items           []bulkItem         `json:"items"`
			DryRun          bool               `json:"dry_run"`
			Limit           *int               `json:"limit"`
		}
		err := decodeJSON([]byte(tc.body), &v, bulkOptions, json.RejectUnknownMembers(tc.reject))
		var fe *domain.FieldError
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%q: %v, want it accepted", tc.body, err)
		case tc.field == "":
		case !errors.As(err, &fe) || !errors.Is(err, ErrInvalidRequest):
			t.Errorf("%q: %v, want a 400 naming %s", tc.body, err, tc.field)
		case fe.Field != tc.field || fe.Reason != tc.reason:
			t.Errorf("%q: %s %q, want %s %q", tc.body, fe.Field, fe.Reason, tc.field, tc.reason)
		}
	}
}

func BenchmarkDecodeSubmit(b *testing.B) {
	body := []byte(`{"review_id":"bench-1f2e-42","content_class":"caption_suggestion","content_type":"text/plain","content":"bench caption bench-1f2e-42: the quick brown fox jumps over the lazy dog"}`)
	b.ReportAllocs()
	for b.Loop() {
		var v submitBody
		if err := decodeJSON(body, &v); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBulkItemsReadAsEncodingJSON: a bulk body's items are read as
// encoding/json reads them, as they always were: (a) the last of a name
// twice is taken, (c) names match up to case, and (d) a member an item
// does not know is ignored; the body's own members and its filter's are
// still read strictly.
func TestBulkItemsReadAsEncodingJSON(t *testing.T) {
	for _, tc := range []struct{ name, items string }{
		{"(a) a name twice in an item", `[{"review_id":"x","review_id":"r1","expected_version":1,"expected_version":7},{"review_id":"r2","review_id":null}]`},
		{"(c) names up to case", `[{"REVIEW_ID":"r1","Expected_Version":7},{"Review_Id":"r2"}]`},
		{"(d) members an item does not know", `[{"review_id":"r1","expected_version":7,"expected_vers":1},{"review_id":"r2","note":{"a":"\ud800"}}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := `{"items":` + tc.items + `,"dry_run":true}`
			var b bulkBody
			if err := decodeBulkJSON([]byte(body), &b); err != nil {
				t.Fatalf("%s: %v", body, err)
			}
			var want []bulkItem
			if err := stdjson.Unmarshal([]byte(tc.items), &want); err != nil {
				t.Fatal(err)
			}
			seven := uint64(7)
			if !reflect.DeepEqual(b.Items, want) || !reflect.DeepEqual(b.Items, []bulkItem{{ReviewID: "r1", ExpectedVersion: &seven}, {ReviewID: "r2"}}) || !b.DryRun {
				t.Fatalf("%s: read %+v, encoding/json %+v", body, b, want)
			}
		})
	}
	for body, field := range map[string]string{
		`{"items":[{"review_id":"r1"}],"items":[]}`:            "items",
		`{"ITEMS":[{"review_id":"r1"}]}`:                       "ITEMS",
		`{"items":[{"review_id":"r1"}],"dryrun":true}`:         "dryrun",
		`{"filter":{"reason":"a","reason":"b"}}`:               "filter.reason",
		`{"filter":{"Reason":"a"}}`:                            "filter.Reason",
		`{"filter":{"reasons":"a"}}`:                           "filter.reasons",
		`{"items":[{"review_id":"r1"}],"cursor":"\ud800"}`:     "cursor",
		`{"items":[{"review_id":"r1"}],"note":"x","note":"y"}`: "note",
		"{\"items\":[{\"review_id\":\"r1\",\"x\":\"\xff\"}]}":  "items",
	} {
		var b bulkBody
		err := decodeBulkJSON([]byte(body), &b)
		var fe *domain.FieldError
		if !errors.As(err, &fe) || fe.Field != field || !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("%q: %v, want a 400 naming %s", body, err, field)
		}
	}
}
