package runner

import (
	"net"
	"os"
	"testing"
	"time"
)

func TestDispatchNATS(t *testing.T) {
	t.Parallel()
	c, err := net.DialTimeout("tcp", "127.0.0.1:4222", time.Second)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("NATS at 127.0.0.1:4222 is unreachable (CI is set, so this fails): %v", err)
		}
		t.Skipf("NATS at 127.0.0.1:4222 is unreachable, skipping: %v", err)
	}
	c.Close()
	testDispatch(t, PubSubNATS)
}
