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
package pgarray

import (
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

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

type text string

func (t *text) TextValue() (pgtype.Text, error) {
	return pgtype.Text{String: string(*t), Valid: true}, nil
}

// Bytes is a bytea[] parameter. A nil element is an empty value, not NULL.
type Bytes [][]byte

func (a Bytes) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Bytes) Index(i int) any                     { return (*bytea)(&a[i]) }
func (a Bytes) IndexType() any                      { return (*bytea)(nil) }

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

type timestamptz time.Time

func (t *timestamptz) TimestamptzValue() (pgtype.Timestamptz, error) {
	return pgtype.Timestamptz{Time: time.Time(*t), Valid: true}, nil
}

// Int8 is a bigint[] parameter.
type Int8 []int64

func (a Int8) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Int8) Index(i int) any                     { return (*int8Elem)(&a[i]) }
func (a Int8) IndexType() any                      { return (*int8Elem)(nil) }

type int8Elem int64

func (n *int8Elem) Int64Value() (pgtype.Int8, error) {
	return pgtype.Int8{Int64: int64(*n), Valid: true}, nil
}

// Int4 is an int[] parameter.
type Int4 []int32

func (a Int4) Dimensions() []pgtype.ArrayDimension { return dimensions(a == nil, len(a)) }
func (a Int4) Index(i int) any                     { return (*int4Elem)(&a[i]) }
func (a Int4) IndexType() any                      { return (*int4Elem)(nil) }

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
