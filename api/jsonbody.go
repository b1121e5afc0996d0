package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	fastjson "github.com/go-json-experiment/json/v1"
)

// Request bodies are read strictly, so that every reader of a body — this
// server, a proxy in front of it, a log reader — sees the same values:
//
//   - the body is one JSON object and nothing after it;
//   - a member name appears once (encoding/json would take the last of two
//     review_ids, while another parser may take the first);
//   - names match exactly (encoding/json would also take "REVIEW_ID" or a
//     name spelt with a Unicode letter that folds onto an ASCII one);
//   - the text is valid UTF-8 and no string the server reads holds an
//     unpaired UTF-16 surrogate escape ("\ud800"): encoding/json would
//     replace either with U+FFFD and review other bytes than were sent.
//
// Members this server does not know are ignored, as the contract says.

// decodeJSON decodes one JSON object into v, a pointer to a struct whose
// fields carry json tags. Errors are *domain.FieldError naming the member at
// fault ("body" when it is the object itself) and wrap ErrInvalidRequest.
func decodeJSON(body []byte, v any) error {
	if plainBody(body, typeOf(v)) {
		// encoding/json's semantics on a quicker decoder (docs/architecture.md);
		// an error is reported by the strict reading, as ever.
		err := fastjson.Unmarshal(body, v)
		if err == nil {
			return nil
		}
		reflect.ValueOf(v).Elem().SetZero() // the strict reading reports it, from nothing
	}
	return decodeStrict(body, v)
}

// decodeStrict is decodeJSON member by member: it reads the object's
// members as sent, checks each, and decodes the known ones only. It is the
// reference decodeJSON's quicker reading must agree with (FuzzDecodeJSON).
func decodeStrict(body []byte, v any) error {
	members, err := readObject(body)
	if err != nil {
		return err
	}
	known := typeOf(v).names
	var filtered bytes.Buffer
	filtered.WriteByte('{')
	for _, m := range members {
		if !known[m.name] {
			continue
		}
		if m.value[0] == '"' {
			if reason := surrogateError(m.value); reason != "" {
				return fieldError(m.name, reason)
			}
		}
		if filtered.Len() > 1 {
			filtered.WriteByte(',')
		}
		name, _ := json.Marshal(m.name)
		filtered.Write(name)
		filtered.WriteByte(':')
		filtered.Write(m.value)
	}
	filtered.WriteByte('}')
	if err := json.Unmarshal(filtered.Bytes(), v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return fieldError(te.Field, fmt.Sprintf("must be a JSON %s", te.Type.Kind()))
		}
		return fieldError("body", fmt.Sprintf("malformed JSON: %v", err))
	}
	return nil
}

// member is one name and its raw value, as sent.
type member struct {
	name  string
	value json.RawMessage
}

// readObject splits a body into its top-level members, in order, refusing
// anything but one object of distinct names in valid UTF-8.
func readObject(body []byte) ([]member, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, fieldError("body", "is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, malformed(body, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fieldError("body", "must be a JSON object")
	}
	var members []member
	seen := make(map[string]bool)
	for dec.More() {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return nil, malformed(body, err)
		}
		name, _ := tok.(string)
		if raw := body[start:dec.InputOffset()]; !utf8.Valid(raw) || surrogateError(raw) != "" {
			return nil, fieldError("body", "a member name is not valid UTF-8 text")
		}
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, malformed(body, err)
		}
		if !utf8.Valid(value) {
			return nil, fieldError(fieldName(name), "is not valid UTF-8: the bytes would be replaced, and other content reviewed than was sent (send binary content with content_encoding base64)")
		}
		if seen[name] {
			return nil, fieldError(fieldName(name), "appears twice in the body; send each member once")
		}
		seen[name] = true
		members = append(members, member{name: name, value: value})
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, malformed(body, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fieldError("body", "unexpected data after the JSON object")
	}
	return members, nil
}

func malformed(body []byte, err error) error {
	if !utf8.Valid(body) {
		return fieldError("body", "is not valid UTF-8")
	}
	return fieldError("body", fmt.Sprintf("malformed JSON: %v", err))
}

// fieldName is a member name fit to quote in a problem's field: names of
// this API are short ASCII; anything else is reported as the body's.
func fieldName(name string) string {
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "body"
	}
	return name
}

// surrogateError says why a raw JSON string literal cannot be decoded
// faithfully, or returns "": an escaped UTF-16 surrogate that is not half
// of a pair has no Unicode value.
func surrogateError(raw []byte) string {
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' || i+1 >= len(raw) {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a one-character escape
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return "holds a malformed \\u escape"
		}
		switch {
		case r >= 0xDC00 && r < 0xE000:
			return "holds an unpaired UTF-16 surrogate escape"
		case r >= 0xD800 && r < 0xDC00:
			if i+7 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return "holds an unpaired UTF-16 surrogate escape"
			}
			lo, ok := hex4(raw, i+8)
			if !ok || lo < 0xDC00 || lo >= 0xE000 {
				return "holds an unpaired UTF-16 surrogate escape"
			}
			i += 11
		default:
			i += 5
		}
	}
	return ""
}

// hex4 parses the four hex digits at raw[at:].
func hex4(raw []byte, at int) (rune, bool) {
	if at+4 > len(raw) {
		return 0, false
	}
	var r rune
	for _, c := range raw[at : at+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// bodyType is what decodeJSON needs to know of the struct a body is
// decoded into.
type bodyType struct {
	names map[string]bool // the member names of its fields
	// plain: every exported field has a json name of its own and no field
	// is embedded (exported or not), so encoding/json matches a member to
	// a field by that name alone (up to case, which plainBody rules out).
	plain bool
}

var bodyTypes sync.Map // reflect.Type → *bodyType

// typeOf returns the bodyType of the struct v points to.
func typeOf(v any) *bodyType {
	t := reflect.TypeOf(v).Elem()
	if bt, ok := bodyTypes.Load(t); ok {
		return bt.(*bodyType)
	}
	bt := &bodyType{names: make(map[string]bool, t.NumField()), plain: true}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			bt.names[name] = true
		}
		if f.Anonymous || f.IsExported() && (name == "" || name == "-") {
			bt.plain = false // encoding/json matches an embedded struct's fields too
		}
	}
	bodyTypes.Store(t, bt)
	return bt
}

// plainBody reports whether encoding/json, decoding body into a struct
// of type bt as it is, reads what the strict reading would: the text is
// valid UTF-8 and holds no \u escape (so no surrogate is replaced), the
// top-level member names hold no escape and appear once each, and every
// name is a field's own or ASCII that does not match one up to case. Its
// answer is only trusted for a body encoding/json then accepts; anything
// else takes the strict reading, which says what is wrong.
func plainBody(body []byte, bt *bodyType) bool {
	if !bt.plain || !utf8.Valid(body) || bytes.Contains(body, []byte(`\u`)) {
		return false
	}
	var buf [16][]byte
	names, ok := topNames(body, buf[:0])
	if !ok {
		return false
	}
	for i, name := range names {
		for _, before := range names[:i] {
			if bytes.Equal(name, before) {
				return false
			}
		}
		if bt.names[string(name)] {
			continue
		}
		for _, c := range name {
			if c >= utf8.RuneSelf {
				return false
			}
		}
		for known := range bt.names {
			if strings.EqualFold(known, string(name)) {
				return false
			}
		}
	}
	return true
}

// topNames appends the names of the members of the JSON object body to
// names, reading only as far as needed to find them; ok is false for a
// body that is not an object of at most cap(names) members with
// unescaped names. For valid JSON the names are exact; for anything else
// they are only a guess, which encoding/json then refuses.
func topNames(body []byte, names [][]byte) ([][]byte, bool) {
	i := skipSpace(body, 0)
	if i >= len(body) || body[i] != '{' {
		return nil, false
	}
	i = skipSpace(body, i+1)
	if i < len(body) && body[i] == '}' {
		return names, skipSpace(body, i+1) == len(body)
	}
	for len(names) < cap(names) {
		if i >= len(body) || body[i] != '"' {
			return nil, false
		}
		end := bytes.IndexByte(body[i+1:], '"')
		if end < 0 {
			return nil, false
		}
		name := body[i+1 : i+1+end]
		if bytes.IndexByte(name, '\\') >= 0 {
			return nil, false
		}
		names = append(names, name)
		i = skipSpace(body, i+2+end)
		if i >= len(body) || body[i] != ':' {
			return nil, false
		}
		var ok bool
		if i, ok = skipValue(body, skipSpace(body, i+1)); !ok {
			return nil, false
		}
		i = skipSpace(body, i)
		switch {
		case i < len(body) && body[i] == ',':
			i = skipSpace(body, i+1)
		case i < len(body) && body[i] == '}':
			return names, skipSpace(body, i+1) == len(body)
		default:
			return nil, false
		}
	}
	return nil, false
}

// skipValue returns the index just past the JSON value at body[i:].
func skipValue(body []byte, i int) (int, bool) {
	if i >= len(body) {
		return 0, false
	}
	switch body[i] {
	case '"':
		return skipString(body, i)
	case '{', '[':
		depth := 0
		for i < len(body) {
			switch body[i] {
			case '"':
				end, ok := skipString(body, i)
				if !ok {
					return 0, false
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
			i++
		}
		return 0, false
	default: // a number, true, false or null
		for i < len(body) && body[i] != ',' && body[i] != '}' && skipSpace(body, i) == i {
			i++
		}
		return i, true
	}
}

// skipString returns the index just past the JSON string starting at
// body[i].
func skipString(body []byte, i int) (int, bool) {
	for i++; i < len(body); i++ {
		switch body[i] {
		case '\\':
			i++
		case '"':
			return i + 1, true
		}
	}
	return 0, false
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(body []byte, i int) int {
	for i < len(body) && (body[i] == ' ' || body[i] == '\t' || body[i] == '\r' || body[i] == '\n') {
		i++
	}
	return i
}

// refuseUnknown answers a 400 naming the first member of the JSON object
// body that v has no field for (prefix goes before its name), for bodies
// where an ignored member would change what a request does.
func refuseUnknown(body []byte, v any, prefix string) error {
	members, err := readObject(body)
	if err != nil {
		return err
	}
	known := typeOf(v).names
	for _, m := range members {
		if !known[m.name] {
			return fieldError(prefix+m.name, "is not a member of this body")
		}
	}
	return nil
}
