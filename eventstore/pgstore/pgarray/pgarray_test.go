package pgarray_test

import (
	"bytes"
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/reviewledger/reviewledger/eventstore/pgstore/pgarray"
	"github.com/reviewledger/reviewledger/migrations/dbtest"
)

var at = time.Date(2026, 12, 1, 16, 0, 0, 123456000, time.UTC)

// cases pairs each array type with the plain slice pgx encodes itself.
func cases() []struct {
	name  string
	oid   uint32
	plain any
	ours  any
} {
	return []struct {
		name  string
		oid   uint32
		plain any
		ours  any
	}{
		{"text", pgtype.TextArrayOID, []string{"review-a", "", "ü ✓", "6f1c2d4e-0000-4000-8000-000000000001"}, pgarray.Text{"review-a", "", "ü ✓", "6f1c2d4e-0000-4000-8000-000000000001"}},
		{"text empty", pgtype.TextArrayOID, []string{}, pgarray.Text{}},
		{"text nil", pgtype.TextArrayOID, []string(nil), pgarray.Text(nil)},
		{"bytea", pgtype.ByteaArrayOID, [][]byte{[]byte(`{"a":1}`), {}, {0, 255}}, pgarray.Bytes{[]byte(`{"a":1}`), nil, {0, 255}}},
		{"bytea nil", pgtype.ByteaArrayOID, [][]byte(nil), pgarray.Bytes(nil)},
		{"timestamptz", pgtype.TimestamptzArrayOID, []time.Time{at, at.Add(-time.Hour).In(time.FixedZone("x", 3600)), {}}, pgarray.Timestamptz{at, at.Add(-time.Hour).In(time.FixedZone("x", 3600)), {}}},
		{"bigint", pgtype.Int8ArrayOID, []int64{0, 1, -1, 1 << 62}, pgarray.Int8{0, 1, -1, 1 << 62}},
		{"int", pgtype.Int4ArrayOID, []int32{0, 3, -7, 1 << 30}, pgarray.Int4{0, 3, -7, 1 << 30}},
		{"text with NULL", pgtype.TextArrayOID, []*string{ptr("a"), nil, ptr("")}, pgarray.Of[pgtype.Text]{{String: "a", Valid: true}, {}, {Valid: true}}},
		{"timestamptz with NULL", pgtype.TimestamptzArrayOID, []*time.Time{nil, &at}, pgarray.Of[pgtype.Timestamptz]{{}, {Time: at, Valid: true}}},
	}
}

func ptr[T any](v T) *T { return &v }

// TestEncodesAsPgxDoes: each type encodes in binary format the very bytes
// pgx encodes for the plain slice, NULL for nil.
func TestEncodesAsPgxDoes(t *testing.T) {
	m := pgtype.NewMap()
	for _, c := range cases() {
		want, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.plain, nil)
		if err != nil {
			t.Fatalf("%s: pgx's own encoding: %v", c.name, err)
		}
		got, err := m.Encode(c.oid, pgtype.BinaryFormatCode, c.ours, nil)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !bytes.Equal(got, want) || (got == nil) != (want == nil) {
			t.Errorf("%s: encoded %x, pgx encodes %x", c.name, got, want)
		}
	}
}

// TestNoAllocationPerElement: encoding 64 elements allocates no more than
// encoding one.
func TestNoAllocationPerElement(t *testing.T) {
	m := pgtype.NewMap()
	buf := make([]byte, 0, 1<<16)
	for _, c := range []struct {
		name      string
		oid       uint32
		one, many any
	}{
		{"text", pgtype.TextArrayOID, pgarray.Text{"review-a"}, pgarray.Text(repeat("review-a"))},
		{"bytea", pgtype.ByteaArrayOID, pgarray.Bytes{{1}}, pgarray.Bytes(repeat([]byte{1}))},
		{"timestamptz", pgtype.TimestamptzArrayOID, pgarray.Timestamptz{at}, pgarray.Timestamptz(repeat(at))},
		{"bigint", pgtype.Int8ArrayOID, pgarray.Int8{1000}, pgarray.Int8(repeat(int64(1000)))},
		{"int", pgtype.Int4ArrayOID, pgarray.Int4{1000}, pgarray.Int4(repeat(int32(1000)))},
		{"text with NULL", pgtype.TextArrayOID, pgarray.Of[pgtype.Text]{{}}, pgarray.Of[pgtype.Text](repeat(pgtype.Text{String: "review-a", Valid: true}))},
		{"timestamptz with NULL", pgtype.TimestamptzArrayOID, pgarray.Of[pgtype.Timestamptz]{{}}, pgarray.Of[pgtype.Timestamptz](repeat(pgtype.Timestamptz{Time: at, Valid: true}))},
	} {
		allocs := func(v any) float64 {
			return testing.AllocsPerRun(50, func() {
				if _, err := m.Encode(c.oid, pgtype.BinaryFormatCode, v, buf[:0]); err != nil {
					t.Fatal(err)
				}
			})
		}
		if one, many := allocs(c.one), allocs(c.many); many > one {
			t.Errorf("%s: %v allocations for 64 elements, %v for one", c.name, many, one)
		}
	}
	// The measure can tell: pgx's own encoding of a plain slice allocates
	// per element.
	one := testing.AllocsPerRun(50, func() { _, _ = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, []string{"review-a"}, buf[:0]) })
	many := testing.AllocsPerRun(50, func() { _, _ = m.Encode(pgtype.TextArrayOID, pgtype.BinaryFormatCode, repeat("review-a"), buf[:0]) })
	if many-one < 63 {
		t.Fatalf("a plain []string of 64 took %v allocations, of one %v: the measure cannot see per-element allocations", many, one)
	}
}

// repeat is 64 times v.
func repeat[T any](v T) []T {
	s := make([]T, 64)
	for i := range s {
		s[i] = v
	}
	return s
}

// TestRoundTrip sends each array to PostgreSQL and reads it back, on each
// query mode: with the statement described (binary, pgx knows the
// parameter's type) and on the exec and simple protocols (pgx knows no
// type: the array goes as its text literal), and NULL for a nil slice.
func TestRoundTrip(t *testing.T) {
	t.Parallel()
	url := dbtest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	types := map[uint32]string{pgtype.TextArrayOID: "text[]", pgtype.ByteaArrayOID: "bytea[]", pgtype.TimestamptzArrayOID: "timestamptz[]",
		pgtype.Int8ArrayOID: "bigint[]", pgtype.Int4ArrayOID: "int[]"}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		pool := dbtest.PoolOn(t, url, dbtest.ExecMode(mode))
		for _, c := range cases() {
			name := fmt.Sprintf("%s, %v", c.name, mode)
			var isNull bool
			if err := pool.QueryRow(ctx, "SELECT $1::"+types[c.oid]+" IS NULL", c.ours).Scan(&isNull); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if isNull != reflect.ValueOf(c.plain).IsNil() {
				t.Errorf("%s: NULL is %v, want %v", name, isNull, reflect.ValueOf(c.plain).IsNil())
			}
			if isNull {
				continue
			}
			dst := reflect.New(reflect.TypeOf(c.plain))
			if err := pool.QueryRow(ctx, "SELECT $1::"+types[c.oid], c.ours).Scan(dst.Interface()); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !sameArray(dst.Elem().Interface(), c.plain) {
				t.Errorf("%s: read back %#v, sent %#v", name, dst.Elem().Interface(), c.plain)
			}
		}
	}
}

// sameArray compares what was read back with what was sent: times as
// instants.
func sameArray(got, want any) bool {
	switch w := want.(type) {
	case []time.Time:
		g := got.([]time.Time)
		for i := range w {
			if !g[i].Equal(w[i]) {
				return false
			}
		}
		return len(g) == len(w)
	case []*time.Time:
		g := got.([]*time.Time)
		for i := range w {
			if (g[i] == nil) != (w[i] == nil) || g[i] != nil && !g[i].Equal(*w[i]) {
				return false
			}
		}
		return len(g) == len(w)
	}
	return reflect.DeepEqual(got, want)
}
