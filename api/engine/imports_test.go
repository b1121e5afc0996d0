package engine

import (
	"os/exec"
	"strings"
	"testing"
)

// The engine imports no transport: its hints go through the Hints port,
// whose Watermill adapters (a Go channel, PostgreSQL, NATS JetStream) are
// package hint's, wired in by the composition root. Nothing the engine's
// own package builds on (its tests aside) reaches Watermill, NATS or pgx.
func TestTheEngineImportsNoTransport(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/reviewledger/reviewledger/api/engine" {
		t.Fatalf("go list -deps . does not end with the engine:\n%s", out)
	}
	for _, dep := range deps {
		for _, transport := range []string{"github.com/ThreeDotsLabs/watermill", "github.com/nats-io/", "github.com/jackc/pgx"} {
			if strings.HasPrefix(dep, transport) {
				t.Errorf("the engine's package depends on %s; transports belong in package hint (or another adapter)", dep)
			}
		}
	}
}
