// Package pgarray holds array parameters that pgx encodes without an
// allocation per element.
//
// pgx encodes a Go slice parameter ([]string, []time.Time, [][]byte) as a
// PostgreSQL array by boxing every element into an interface value, which
// allocates for each one: for the set-based statements of a group commit,
// tens of allocations per review. The types here hand pgx a pointer to each
// element instead, which boxes for free, and the element answers pgx's
// valuer interface (pgtype.TextValuer, BytesValuer, TimestamptzValuer,
// Int64Valuer) by value. They encode in binary format exactly what the
// plain slice would; a nil slice is SQL NULL, as with pgx's own encoding.
//
// Where pgx knows no type for a parameter (a pool on the exec or simple
// protocol, chosen by default_query_exec_mode in the connection string,
// sends every argument as untyped text), each type is a driver.Valuer
// giving the array's text literal, as pgx writes it for the array type.
package pgarray

import (
	"database/sql/driver"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// maps are type maps for writing text literals; a pgtype.Map is for one
// goroutine at a time.
var maps = sync.Pool{New: func() any { return pgtype.NewMap() }}

// literal is the text form of the array v of PostgreSQL type oid; nil for
// NULL.
func literal(oid uint32, v pgtype.ArrayGetter) (driver.Value, error) {
	if v.Dimensions() == nil {
		return nil, nil
	}
	m := maps.Get().(*pgtype.Map)
	defer maps.Put(m)
	buf, err := m.Encode(oid, pgtype.TextFormatCode, v, nil)
	if err != nil {
		return nil, fmt.Errorf("pgarray: %w", err)
	}
	return string(buf), nil
}

// dimensions is the one dimension of a flat array of n elements; nil (SQL
// NULL) for a nil slice.
func dimensions(isNil bool, n int) []pgtype.ArrayDimension {
	if isNil {
		return nil
	}
	return []pgtype.ArrayDimension{{Length: int32(n), LowerBound: 1}}
}

// Text is a text[] (or varchar[], or text cast in SQL) parameter.
type Text []string

func (a Text) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Text) Index(i int) any                     { return (*text)(&a[i]) }
func (a Text) IndexType() any                      { return (*text)(nil) }
func (a Text) Value() (driver.Value, error)        { return literal(pgtype.TextArrayOID, a) }

type text string

func (t *text) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

// Bytes is a bytea[] parameter. A nil element is an empty value, not NULL.
type Bytes [][]byte

func (a Bytes) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Bytes) Index(i int) any                     { return (*bytea)(&a[i]) }
func (a Bytes) IndexType() any                      { return (*bytea)(nil) }
func (a Bytes) Value() (driver.Value, error)        { return literal(pgtype.ByteaArrayOID, a) }

type bytea []byte

func (b *bytea) BytesValue() ([]byte, error) {
	if *b == nil {
		return []byte{}, nil
	}
	return *b, nil
}

// Timestamptz is a timestamptz[] parameter.
type Timestamptz []time.Time

func (a Timestamptz) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Timestamptz) Index(i int) any                     { return (*timestamptz)(&a[i]) }
func (a Timestamptz) IndexType() any                      { return (*timestamptz)(nil) }
func (a Timestamptz) Value() (driver.Value, error)        { return literal(pgtype.TimestamptzArrayOID, a) }

type timestamptz time.Time

func (t *timestamptz) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*t), Valid: true}, nil
}

// Int8 is a bigint[] parameter.
type Int8 []int64

func (a Int8) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Int8) Index(i int) any                     { return (*int8Elem)(&a[i]) }
func (a Int8) IndexType() any                      { return (*int8Elem)(nil) }
func (a Int8) Value() (driver.Value, error)        { return literal(pgtype.Int8ArrayOID, a) }

type int8Elem int64

func (n *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*n), Valid: true}, nil
}

// Int4 is an int[] parameter.
type Int4 []int32

func (a Int4) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Int4) Index(i int) any                     { return (*int4Elem)(&a[i]) }
func (a Int4) IndexType() any                      { return (*int4Elem)(nil) }
func (a Int4) Value() (driver.Value, error)        { return literal(pgtype.Int4ArrayOID, a) }

type int4Elem int32

func (n *int4Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*n), Valid: true}, nil
}

// Of is an array of pgx's own value types (pgtype.Text, pgtype.Timestamptz
// and the like), whose Valid false is a NULL element.
type Of[T any] []T

func (a Of[T]) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Of[T]) Index(i int) any                     { return &a[i] }
func (a Of[T]) IndexType() any                      { return (*T)(nil) }

// Value is the text literal of the array of T's PostgreSQL type.
func (a Of[T]) Value() (driver.Value, error) {
	m := maps.Get().(*pgtype.Map)
	elem, ok := m.TypeForValue(*new(T))
	var array *pgtype.Type
	if ok {
		array, ok = m.TypeForName("_" + elem.Name)
	}
	maps.Put(m)
	if !ok {
		return nil, fmt.Errorf("pgarray: no PostgreSQL array type known for %T", *new(T))
	}
	return literal(array.OID, a)
}
