package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
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
	members, err := readObject(body)
	if err != nil {
		return err
	}
	known := jsonNames(v)
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

// jsonNames returns the member names of the struct v points to.
func jsonNames(v any) map[string]bool {
	t := reflect.TypeOf(v).Elem()
	names := make(map[string]bool, t.NumField())
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name != "" && name != "-" {
			names[name] = true
		}
	}
	return names
}

// refuseUnknown answers a 400 naming the first member of the JSON object
// body that v has no field for (prefix goes before its name), for bodies
// where an ignored member would change what a request does.
func refuseUnknown(body []byte, v any, prefix string) error {
	members, err := readObject(body)
	if err != nil {
		return err
	}
	known := jsonNames(v)
	for _, m := range members {
		if !known[m.name] {
			return fieldError(prefix+m.name, "is not a member of this body")
		}
	}
	return nil
}
