package ledger

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
)

// binarySchema is the first schema whose metadata is stored binary
// (appendBinary); JSON metadata (schemas 1 to 3) always starts with '{'.
const binarySchema = 4

// binaryMark is the first byte of binary metadata.
const binaryMark = 0x01

// appendBinary appends m in the binary form: the mark, the schema as an
// unsigned varint, the hash's 32 bytes, then the actor, the request ID and
// the traceparent, each its length as an unsigned varint and its bytes.
// The common metadata of an event, {"v":3,"a":"engine","h":"…"} in JSON
// (70 bytes), is 43 bytes so.
func appendBinary(b []byte, m Metadata) ([]byte, error) {
	raw, err := hex.DecodeString(m.Hash)
	if err != nil || len(raw) != sha256.Size {
		return nil, fmt.Errorf("metadata hash %q is not a hex SHA-256", m.Hash)
	}
	b = append(b, binaryMark)
	b = binary.AppendUvarint(b, uint64(m.Schema))
	b = append(b, raw...)
	for _, s := range []string{m.Actor, m.RequestID, m.TraceParent} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	return b, nil
}

var errBinaryMetadata = errors.New("binary metadata is malformed")

// decodeBinary reads metadata in the binary form. It refuses a schema
// below binarySchema, a short hash, a length past the end and bytes after
// the traceparent.
func decodeBinary(b []byte) (Metadata, error) {
	if len(b) == 0 || b[0] != binaryMark {
		return Metadata{}, errBinaryMetadata
	}
	b = b[1:]
	schema, n := uvarint(b)
	if n <= 0 || schema < binarySchema || schema > 1<<30 {
		return Metadata{}, fmt.Errorf("%w: schema", errBinaryMetadata)
	}
	b = b[n:]
	if len(b) < sha256.Size {
		return Metadata{}, fmt.Errorf("%w: hash", errBinaryMetadata)
	}
	m := Metadata{Schema: int(schema), Hash: hex.EncodeToString(b[:sha256.Size])}
	b = b[sha256.Size:]
	for _, f := range []*string{&m.Actor, &m.RequestID, &m.TraceParent} {
		l, n := uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return Metadata{}, fmt.Errorf("%w: length", errBinaryMetadata)
		}
		*f, b = string(b[n:n+int(l)]), b[n+int(l):]
	}
	if len(b) != 0 {
		return Metadata{}, fmt.Errorf("%w: %d bytes after the traceparent", errBinaryMetadata, len(b))
	}
	return m, nil
}

// uvarint is binary.Uvarint refusing (n = 0) the longer encodings of a
// number, so that each metadata has one binary form.
func uvarint(b []byte) (uint64, int) {
	v, n := binary.Uvarint(b)
	if n > 1 && b[n-1] == 0 {
		return 0, 0
	}
	return v, n
}
