package esdbstore

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// knownDeviation names the conformance subtests this backend fails by
// design: the server keeps no index by event ID, so an ID reused in another
// stream is not detected (docs/esdbstore.md, "Deviation"), whether appended
// alone or in an AppendMulti. They are left out of every run of the suite
// here unless -skip is given explicitly, and the run says so.
const knownDeviation = "Test(Conformance|FakeServerConformance)/(AppendMulti)?DuplicateEventID/an_id_in_another_stream"

func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.skip"); f != nil && f.Value.String() == "" {
		if err := f.Value.Set(knownDeviation); err != nil {
			os.Exit(2)
		}
		fmt.Fprintf(os.Stderr, "esdbstore: skipping %s, the documented deviation (docs/esdbstore.md); -skip '^$' runs it\n", knownDeviation)
	}
	goleak.VerifyTestMain(m)
}
