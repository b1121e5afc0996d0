package ledger

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	storedjson "github.com/go-json-experiment/json/v1"

	"github.com/reviewledger/reviewledger/eventstore"
)

// Metadata is stored with every event.
//
// Schema 1 metadata is stored as {"schema","actor","request_id",
// "traceparent","prev_hash","hash"}, both hashes in hex. Schemas 2 and 3
// store it compact: {"v","a","r","t","h"}, the hash in unpadded base64url
// and no prev_hash, which is the hash of the event before and is taken from
// it on reading. Schema 4 and later store the same fields binary
// (appendBinary). The chain is the same in every form: Hash is always the hex
// SHA-256 of chainHash's input, which holds the previous hash in hex.
type Metadata struct {
	Schema      int
	Actor       string
	RequestID   string
	TraceParent string
	// PrevHash is the hash of the event before. Schema 1 stores it; for
	// later schemas the reader sets it (History, Conflicts).
	PrevHash string
	Hash     string
}

// compactSchema is the first schema whose metadata is stored compact.
const compactSchema = 2

type metadataV1 struct {
	Schema      int    `json:"schema"`
	Actor       string `json:"actor,omitempty"`
	RequestID   string `json:"request_id,omitempty"`
	TraceParent string `json:"traceparent,omitempty"`
	PrevHash    string `json:"prev_hash"`
	Hash        string `json:"hash"`
}

type metadataV2 struct {
	Schema      int    `json:"v"`
	Actor       string `json:"a,omitempty"`
	RequestID   string `json:"r,omitempty"`
	TraceParent string `json:"t,omitempty"`
	Hash        string `json:"h"`
}

// storedMetadata reads either form: V set means compact.
type storedMetadata struct {
	metadataV1
	V *int   `json:"v"`
	A string `json:"a"`
	R string `json:"r"`
	T string `json:"t"`
	H string `json:"h"`
}

// MarshalJSON writes m as JSON: the stored form of schemas 1 to 3, and of
// later schemas the compact form of 2 (what a reader of JSON is shown).
func (m Metadata) MarshalJSON() ([]byte, error) {
	if m.Schema < compactSchema {
		return json.Marshal(metadataV1(m))
	}
	raw, err := hex.DecodeString(m.Hash)
	if err != nil || len(raw) == 0 {
		return nil, fmt.Errorf("metadata hash %q is not hex", m.Hash)
	}
	return json.Marshal(metadataV2{Schema: m.Schema, Actor: m.Actor, RequestID: m.RequestID, TraceParent: m.TraceParent,
		Hash: base64.RawURLEncoding.EncodeToString(raw)})
}

// UnmarshalJSON reads JSON metadata of any schema (DecodeMetadata, which
// reads the stored binary form as well).
func (m *Metadata) UnmarshalJSON(b []byte) error {
	d, err := DecodeMetadata(b)
	if err != nil {
		return err
	}
	*m = d
	return nil
}

// Encode returns m in the stored form of its schema: binary from
// binarySchema on, JSON before (MarshalJSON).
func (m Metadata) Encode() ([]byte, error) {
	if m.Schema >= binarySchema {
		return appendBinary(make([]byte, 0, 48+len(m.Actor)+len(m.RequestID)+len(m.TraceParent)), m)
	}
	return json.Marshal(m)
}

// DecodeMetadata reads stored metadata of any schema: binary (schema 4 on)
// or JSON (schemas 1 to 3), the JSON with encoding/json's semantics on the
// faster decoder the ledger reads events with.
func DecodeMetadata(b []byte) (Metadata, error) {
	if len(b) > 0 && b[0] == binaryMark {
		return decodeBinary(b)
	}
	s, ok := scanCompact(b)
	if !ok {
		s = storedMetadata{}
		if err := storedjson.Unmarshal(b, &s); err != nil {
			return Metadata{}, err
		}
	}
	if s.V == nil {
		return Metadata(s.metadataV1), nil
	}
	if *s.V < compactSchema {
		return Metadata{}, fmt.Errorf("compact metadata of schema %d", *s.V)
	}
	raw, err := base64.RawURLEncoding.DecodeString(s.H)
	if err != nil || len(raw) == 0 {
		return Metadata{}, errors.New("metadata hash is not base64url")
	}
	return Metadata{Schema: *s.V, Actor: s.A, RequestID: s.R, TraceParent: s.T, Hash: hex.EncodeToString(raw)}, nil
}

// storesPrev reports whether m's stored form holds PrevHash.
func (m Metadata) storesPrev() bool { return m.Schema < compactSchema }

// chainsOnto reports whether the stored event rec, with metadata m,
// follows the event whose hash is prev: by the stored prev_hash of schema
// 1, by recomputing the hash otherwise.
func (m Metadata) chainsOnto(prev string, rec eventstore.RecordedEvent) bool {
	if m.storesPrev() {
		return m.PrevHash == prev
	}
	return chainHash(prev, rec.Stream, rec.Revision, rec.Type, rec.Data, m.Actor) == m.Hash
}
