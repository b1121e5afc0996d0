package ledger

import (
	"reflect"
	"testing"

	storedjson "github.com/go-json-experiment/json/v1"
)

// FuzzScanCompact: whatever scanCompact accepts, the general decoder reads
// into the same fields.
func FuzzScanCompact(f *testing.F) {
	for _, seed := range []string{
		`{"v":2,"a":"engine","h":"wp62QD8YGeWJFe5O7ykBAiJ1d-LMcTZixTf-BtqepjM"}`,
		`{"v":2,"a":"bench","r":"req-1","t":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","h":"x"}`,
		`{"v":2}`, `{"v":02}`, `{"v":2,"v":3}`, `{"V":2}`, `{"v":2,"a":"\u00e9"}`, `{"v":2,"a":"é"}`, `{"v":2,"x":"y"}`,
		`{"schema":1,"prev_hash":"","hash":"ab"}`, `{}`, `{"v":2,}`, `{"v":2,"a":}`, `{"a":"x"}`, `{"v":2,"a":"x"`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := scanCompact(b)
		if !ok {
			return
		}
		var slow storedMetadata
		if err := storedjson.Unmarshal(b, &slow); err != nil {
			t.Fatalf("%q: scanned as %+v, the general decoder refuses it: %v", b, fast, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: scanned %+v, decoded %+v", b, fast, slow)
		}
	})
}

// TestScanCompactReadsWhatIsWritten: the metadata MarshalJSON writes is
// read by the scan, not the general decoder.
func TestScanCompactReadsWhatIsWritten(t *testing.T) {
	for _, m := range []Metadata{
		{Schema: 2, Actor: "engine", Hash: "c2ee3b0a3f0619e58915ee4eef2901022275" + "77e2cc7136628b7fe06dab6a6631"},
		{Schema: 2, Actor: "bench", RequestID: "r-1", TraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", Hash: "00ff"},
	} {
		b, err := m.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := scanCompact(b); !ok {
			t.Errorf("%s: not scanned", b)
		}
		got, err := DecodeMetadata(b)
		if err != nil || got != m {
			t.Errorf("%s: read %+v, %v; want %+v", b, got, err, m)
		}
	}
}
