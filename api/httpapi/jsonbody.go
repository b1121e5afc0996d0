package httpapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Request bodies are read strictly, so that every reader of a body — this
// server, a proxy in front of it, a log reader — sees the same values:
//
//   - the body is one JSON object and nothing after it;
//   - a member name appears once in the body's object (encoding/json would
//     take the last of two review_ids, while another parser may take the
//     first);
//   - the body's names match exactly (encoding/json would also take
//     "REVIEW_ID" or a name spelt with a Unicode letter that folds onto an
//     ASCII one);
//   - the text is valid UTF-8 and no string the server reads as text — a
//     member name of the body, or the value of one of its members that is a
//     string — holds an unpaired UTF-16 surrogate escape ("\ud800"):
//     encoding/json would replace either with U+FFFD and review other bytes
//     than were sent.
//
// Below the body's own members nothing more is asked: a value of content
// that is an object or array is kept as sent, byte for byte (a name twice
// or a lone surrogate in it included), and an unknown member is skipped
// whatever it holds. Members this server does not know are ignored, as the
// contract says, unless the caller passes json.RejectUnknownMembers(true).
//
// go-json-experiment/json reads the body under readBody, which allows what
// the rules allow below the body's own members, and a token pass over
// those members (objectFault) asks the rest.
var readBody = json.JoinOptions(
	jsontext.AllowDuplicateNames(true), // a name twice among the body's own members is objectFault's
	jsontext.AllowInvalidUTF8(true),    // for surrogate escapes only: the text is checked to be UTF-8 first
	json.MatchCaseInsensitiveNames(false),
	json.RejectUnknownMembers(false),
)

// decodeJSON decodes one JSON object into v, a pointer to a struct whose
// fields carry json tags, with go-json-experiment/json under readBody and
// opts. Errors are *domain.FieldError naming the member at fault ("body"
// when it is the object itself) and wrap ErrInvalidRequest. Every fault of
// the text (syntax, UTF-8, a name twice, a surrogate, data after the
// object) is found before any of its meaning (a member of the wrong type,
// an unknown one).
func decodeJSON(body []byte, v any, opts ...json.Options) error {
	if len(opts) == 0 {
		opts = readOnly
	} else {
		opts = append([]json.Options{readBody}, opts...)
	}
	err := json.Unmarshal(body, v, opts...)
	if err == nil && utf8.Valid(body) {
		// Unmarshal read one object (a struct takes nothing else): only the
		// rules of its own members are left to ask.
		return objectFault(body, typeOf(v).names, "")
	}
	// Unmarshal stops at the first fault, of text or meaning: the body is
	// read again for the faults of its text.
	dec := jsontext.NewDecoder(bytes.NewReader(body), readBody)
	switch dec.PeekKind() {
	case '{':
	case 'n', 'f', 't', '"', '0', '[':
		return fieldError("body", "must be a JSON object")
	default: // nothing, or what starts no JSON value
		if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
			return textError(body, err)
		}
		return fieldError("body", "is empty; a JSON object is required")
	}
	if err := dec.SkipValue(); err != nil {
		return textError(body, err)
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return fieldError("body", "unexpected data after the JSON object")
	}
	if err := objectFault(body, typeOf(v).names, ""); err != nil {
		return err
	}
	return meaningError(err)
}

var readOnly = []json.Options{readBody}

// objectFault reads the members of object, valid JSON text under
// readBody, token by token at its own depth, and returns the first fault
// of them by the rules of the body's own members (above), or nil: it is
// not an object, a name is not UTF-8 text or appears twice, a value is not
// UTF-8, or the string value of a member named in known (the ones read as
// text) holds an unpaired surrogate. prefix goes before a name in a
// problem's field.
func objectFault(object []byte, known map[string]bool, prefix string) error {
	r := readers.Get().(*reader)
	defer readers.Put(r)
	r.text.Reset(object)
	dec := &r.dec
	dec.Reset(&r.text, readBody)
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return fieldError("body", "must be a JSON object")
	}
	names, ends := r.names[:0], r.ends[:0] // the names so far, one after another
	for dec.PeekKind() == '"' {
		raw, err := dec.ReadValue() // a name, as sent
		if err != nil {
			return textError(object, err)
		}
		if !raw.IsValid() {
			return fieldError("body", "a member name is not valid UTF-8 text")
		}
		start := len(names)
		names, _ = jsontext.AppendUnquote(names, raw)
		name := names[start:]
		begin := 0
		for _, end := range ends {
			if bytes.Equal(name, names[begin:end]) {
				return fieldError(prefixed(prefix, string(name)), "appears twice in the body; send each member once")
			}
			begin = end
		}
		ends = append(ends, len(names))
		value, err := dec.ReadValue()
		if err != nil {
			return textError(object, err)
		}
		switch {
		case !utf8.Valid(value):
			return fieldError(prefixed(prefix, string(name)), "is not valid UTF-8: the bytes would be replaced, and other content reviewed than was sent (send binary content with content_encoding base64)")
		case known[string(name)] && value.Kind() == '"' && !value.IsValid():
			return fieldError(prefixed(prefix, string(name)), "holds an unpaired UTF-16 surrogate escape")
		}
	}
	r.names, r.ends = names, ends
	return nil
}

// reader is objectFault's decoder and buffers, kept for the next body.
type reader struct {
	text  bytes.Reader
	dec   jsontext.Decoder
	names []byte
	ends  []int
}

var readers = sync.Pool{New: func() any { return new(reader) }}

// memberValue is the value of the member name of the JSON object text
// object, valid under readBody, or nil.
func memberValue(object []byte, name string) jsontext.Value {
	dec := jsontext.NewDecoder(bytes.NewReader(object), readBody)
	if _, err := dec.ReadToken(); err != nil {
		return nil
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		found := tok.String() == name
		value, err := dec.ReadValue()
		if err != nil || found {
			return value
		}
	}
	return nil
}

// prefixed is a problem's field for the member name under prefix.
func prefixed(prefix, name string) string {
	if f := fieldName(name); f != "body" {
		return prefix + f
	}
	return "body"
}

// bodyType is what decodeJSON needs to know of the struct a body is
// decoded into.
type bodyType struct {
	names map[string]bool // the member names of its fields
}

var bodyTypes sync.Map // reflect.Type → *bodyType

// typeOf returns the bodyType of the struct v points to.
func typeOf(v any) *bodyType {
	t := reflect.TypeOf(v).Elem()
	if bt, ok := bodyTypes.Load(t); ok {
		return bt.(*bodyType)
	}
	bt := &bodyType{names: make(map[string]bool, t.NumField())}
	for f := range t.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case !f.IsExported() || name == "-":
		case name == "":
			bt.names[f.Name] = true
		default:
			bt.names[name] = true
		}
	}
	bodyTypes.Store(t, bt)
	return bt
}

// textError is the problem of a body that is not JSON text.
func textError(body []byte, err error) error {
	if !utf8.Valid(body) {
		return fieldError("body", "is not valid UTF-8")
	}
	return fieldError("body", fmt.Sprintf("malformed JSON: %s", strings.TrimPrefix(err.Error(), "jsontext: ")))
}

// meaningError is the problem of a well-formed body that does not fit the
// struct it is decoded into.
func meaningError(err error) error {
	var se *json.SemanticError
	if !errors.As(err, &se) || se.JSONPointer == "" {
		return fieldError("body", fmt.Sprintf("malformed JSON: %v", err))
	}
	field := memberPath(se.JSONPointer)
	if errors.Is(se.Err, json.ErrUnknownName) {
		return fieldError(field, "is not a member of this body")
	}
	kind := "value"
	if t := se.GoType; t != nil {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		kind = t.Kind().String()
	}
	return fieldError(field, "must be a JSON "+kind)
}

// memberPath spells a JSON pointer into a request body the way problems
// name fields: /items/0/review_id is items[0].review_id. The bodies'
// structs have no member named by digits, so digits are an array index.
func memberPath(ptr jsontext.Pointer) string {
	var path strings.Builder
	for tok := range ptr.Tokens() {
		switch {
		case path.Len() > 0 && tok != "" && strings.Trim(tok, "0123456789") == "":
			path.WriteString("[" + tok + "]")
		case fieldName(tok) == "body":
			return "body"
		case path.Len() > 0:
			path.WriteString("." + tok)
		default:
			path.WriteString(tok)
		}
	}
	return path.String()
}

// fieldName is a member name fit to quote in a problem's field: names of
// this API are short ASCII; anything else is reported as the body's.
func fieldName(name string) string {
	if name == "" || len(name) > 64 || strings.ContainsFunc(name, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "body"
	}
	return name
}
