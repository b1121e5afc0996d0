package ledger

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

const testHash = "ee0fc57dd552f965e9bb47341c2ea1bd8ea52c0f78792b7371d66ba8481b4a14"

// TestBinaryMetadata: schema 4 metadata is stored binary and read back
// into the same fields, and is 43 bytes for the common event's {actor,
// hash}, which JSON stored in 70; the JSON forms of schemas 1 to 3 still
// read as before; a schema below 4 is not written binary.
func TestBinaryMetadata(t *testing.T) {
	for _, m := range []Metadata{
		{Schema: 4, Actor: "engine", Hash: testHash},
		{Schema: 4, Actor: "platform", RequestID: "req-1", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", Hash: testHash},
		{Schema: 5, Hash: testHash},
	} {
		b, err := m.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != binaryMark || json.Valid(b) {
			t.Fatalf("%+v stored as %q, want the binary form", m, b)
		}
		got, err := DecodeMetadata(b)
		if err != nil || got != m {
			t.Fatalf("%q read as %+v, %v; want %+v", b, got, err, m)
		}
	}
	b, _ := Metadata{Schema: 4, Actor: "engine", Hash: testHash}.Encode()
	j, _ := json.Marshal(Metadata{Schema: 3, Actor: "engine", Hash: testHash})
	if len(b) != 43 || len(j) != 70 {
		t.Fatalf("common metadata: %d bytes binary, %d JSON; want 43 and 70", len(b), len(j))
	}
	for _, m := range []Metadata{{Schema: 3, Actor: "engine", Hash: testHash}, {Schema: 1, Actor: "engine", Hash: testHash}} {
		b, err := m.Encode()
		if err != nil || !json.Valid(b) {
			t.Fatalf("schema %d stored as %q (%v), want JSON", m.Schema, b, err)
		}
		if got, err := DecodeMetadata(b); err != nil || got != m {
			t.Fatalf("%s read as %+v, %v", b, got, err)
		}
	}
	if _, err := (Metadata{Schema: 4, Hash: "abcd"}).Encode(); err == nil {
		t.Fatal("a hash of 2 bytes written")
	}
}

// TestBinaryMetadataRefusesMalformed: a truncated form, bytes after it, a
// length past the end or a schema below 4 is an error, never metadata.
func TestBinaryMetadataRefusesMalformed(t *testing.T) {
	good, err := Metadata{Schema: 4, Actor: "engine", RequestID: "r", Hash: testHash}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	bad := map[string][]byte{
		"empty after the mark": {binaryMark},
		"schema 3":             append([]byte{binaryMark, 3}, good[2:]...),
		"bytes after it":       append(bytes.Clone(good), 0),
		"a longer varint":      append([]byte{binaryMark, 0x84, 0x00}, good[2:]...),
		"a length past the end": func() []byte {
			b := bytes.Clone(good)
			b[2+32] = 100 // the actor's length
			return b
		}(),
	}
	for i := 1; i < len(good); i++ {
		bad[fmt.Sprintf("cut at %d", i)] = good[:i]
	}
	for name, b := range bad {
		if m, err := DecodeMetadata(b); !errors.Is(err, errBinaryMetadata) {
			t.Errorf("%s (%q): read as %+v, %v; want errBinaryMetadata", name, b, m, err)
		}
	}
}

// FuzzDecodeBinary: what the binary decoder accepts is written back to the
// same bytes.
func FuzzDecodeBinary(f *testing.F) {
	for _, m := range []Metadata{{Schema: 4, Actor: "engine", Hash: testHash}, {Schema: 4, RequestID: "r", TraceParent: "t", Hash: testHash}} {
		b, err := m.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{binaryMark, 4})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeBinary(b)
		if err != nil {
			return
		}
		back, err := m.Encode()
		if err != nil || !bytes.Equal(back, b) {
			t.Fatalf("%q read as %+v, written back as %q (%v)", b, m, back, err)
		}
	})
}
