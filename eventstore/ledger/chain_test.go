package ledger

import "testing"

// TestChainHashInput pins the hash of an event to its documented input:
// each of the previous hash, stream, revision, type, actor and body as its
// length in decimal, a colon and the part. The first figure was computed
// outside the code, with
//
//	printf '0:8:review-a1:09:Submitted8:platform17:{"review_id":"a"}' | sha256sum
//
// so a change to how the input is built breaks every stored chain and this
// test.
func TestChainHashInput(t *testing.T) {
	cases := []struct {
		prev, stream string
		rev          uint64
		typ          string
		data         []byte
		actor        string
		want         string
	}{
		{"", "review-a", 0, "Submitted", []byte(`{"review_id":"a"}`), "platform", "33004562715a680e6fe628fa8e8913ec8ba1aa44607d984212f69c5ea52d1b55"},
		{"3f1c", "review-b", 12, "Decided", nil, "", "f04a787e04a3db1762a387f205a7adf4ebbeb92f9eee8f0868747b128012cf39"},
		{"abc", "review-ü", 1234567, "FindingReceived", []byte("x:y"), "engine", "fc189353c57c5d9be7c1f5d754a94c5e3fc22085c4a48b3c345588396e6142c5"},
	}
	for _, c := range cases {
		if got := chainHash(c.prev, c.stream, c.rev, c.typ, c.data, c.actor); got != c.want {
			t.Errorf("chainHash(%q, %q, %d, %q, %q, %q) = %s, want %s", c.prev, c.stream, c.rev, c.typ, c.data, c.actor, got, c.want)
		}
	}
}

func BenchmarkChainHash(b *testing.B) {
	data := make([]byte, 400)
	b.ReportAllocs()
	for b.Loop() {
		chainHash("33004562715a680e6fe628fa8e8913ec8ba1aa44607d984212f69c5ea52d1b55", "review-bench-1234", 3, "FindingReceived", data, "engine")
	}
}
