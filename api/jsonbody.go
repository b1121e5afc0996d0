package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// Request bodies are read strictly, so that every reader of a body — this
// server, a proxy in front of it, a log reader — sees the same values:
//
//   - the body is one JSON object and nothing after it;
//   - a member name appears once in an object (encoding/json would take
//     the last of two review_ids, while another parser may take the first);
//   - names match exactly (encoding/json would also take "REVIEW_ID" or a
//     name spelt with a Unicode letter that folds onto an ASCII one);
//   - the text is valid UTF-8 and no string holds an unpaired UTF-16
//     surrogate escape ("\ud800"): encoding/json would replace either with
//     U+FFFD and review other bytes than were sent.
//
// Members this server does not know are ignored, as the contract says,
// unless the caller passes json.RejectUnknownMembers(true).
var strictBody = json.JoinOptions(
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
	json.MatchCaseInsensitiveNames(false),
	json.RejectUnknownMembers(false),
)

// decodeJSON decodes one JSON object into v, a pointer to a struct whose
// fields carry json tags, with go-json-experiment/json under strictBody and
// opts. Errors are *domain.FieldError naming the member at fault ("body"
// when it is the object itself) and wrap ErrInvalidRequest. Every fault of
// the text (syntax, UTF-8, a name twice, data after the object) is found
// before any of its meaning (a member of the wrong type, an unknown one).
func decodeJSON(body []byte, v any, opts ...json.Options) error {
	if len(opts) == 0 {
		opts = strictOnly
	} else {
		opts = append([]json.Options{strictBody}, opts...)
	}
	err := json.Unmarshal(body, v, opts...)
	if err == nil && bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
		return nil
	}
	// Unmarshal stops at the first fault, of text or meaning: the body is
	// read again for the faults of its text.
	dec := jsontext.NewDecoder(bytes.NewReader(body), opts...)
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
	return meaningError(err)
}

var strictOnly = []json.Options{strictBody}

// textError is the problem of a body that is not strict JSON text.
func textError(body []byte, err error) error {
	var se *jsontext.SyntacticError
	if !errors.As(err, &se) {
		return fieldError("body", fmt.Sprintf("malformed JSON: %v", err))
	}
	member := "body" // the member at fault; a name's fault is the object's
	for tok := range se.JSONPointer.Tokens() {
		member = fieldName(tok)
		break
	}
	invalid := errors.Is(se.Err, errInvalidUTF8)
	surrogate := !errors.Is(se.Err, io.ErrUnexpectedEOF) && lonelySurrogate(body[min(se.ByteOffset, int64(len(body))):])
	switch {
	case errors.Is(se.Err, jsontext.ErrDuplicateName) && strings.Count(string(se.JSONPointer), "/") == 1:
		return fieldError(member, "appears twice in the body; send each member once")
	case errors.Is(se.Err, jsontext.ErrDuplicateName):
		return fieldError(member, "holds an object naming a member twice; send each member once")
	case se.JSONPointer == "" && (invalid || surrogate):
		return fieldError("body", "a member name is not valid UTF-8 text")
	case surrogate:
		return fieldError(member, "holds an unpaired UTF-16 surrogate escape")
	case invalid:
		return fieldError(member, "is not valid UTF-8: the bytes would be replaced, and other content reviewed than was sent (send binary content with content_encoding base64)")
	}
	if !utf8.Valid(body) {
		return fieldError("body", "is not valid UTF-8")
	}
	return fieldError("body", fmt.Sprintf("malformed JSON: %s", strings.TrimPrefix(err.Error(), "jsontext: ")))
}

// lonelySurrogate reports whether text starts with the \u escape of a
// UTF-16 surrogate (jsontext refuses it for not being half of a pair).
func lonelySurrogate(text []byte) bool {
	if len(text) < 6 || text[0] != '\\' || text[1] != 'u' {
		return false
	}
	r, err := strconv.ParseUint(string(text[2:6]), 16, 16)
	return err == nil && utf16.IsSurrogate(rune(r))
}

// errInvalidUTF8 is jsontext's error for a string that is not UTF-8, which
// it exports no variable for.
var errInvalidUTF8 = func() error {
	var se *jsontext.SyntacticError
	if errors.As(jsontext.NewDecoder(strings.NewReader("\"\xff\"")).SkipValue(), &se) {
		return se.Err
	}
	return nil
}()

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
