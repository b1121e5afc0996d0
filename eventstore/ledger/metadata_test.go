package ledger

import (
	"encoding/json"
	"strings"
	"testing"
)

// Metadata reads both stored forms into the same fields and writes the
// form of its schema: schema 1 as it always was, schema 2 compact.
func TestMetadataForms(t *testing.T) {
	const hash = "ee0fc57dd552f965e9bb47341c2ea1bd8ea52c0f78792b7371d66ba8481b4a14"
	v1 := `{"schema":1,"actor":"platform","request_id":"req-1","prev_hash":"","hash":"` + hash + `"}`
	var m Metadata
	if err := json.Unmarshal([]byte(v1), &m); err != nil {
		t.Fatal(err)
	}
	if m != (Metadata{Schema: 1, Actor: "platform", RequestID: "req-1", Hash: hash}) || !m.storesPrev() {
		t.Fatalf("schema 1: %+v", m)
	}
	if b, err := json.Marshal(m); err != nil || string(b) != v1 {
		t.Fatalf("schema 1 written as %s (%v), want %s", b, err, v1)
	}

	m = Metadata{Schema: 2, Actor: "engine", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", PrevHash: hash, Hash: hash}
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"v":2,"a":"engine","t":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","h":"7g_FfdVS-WXpu0c0HC6hvY6lLA94eStzcdZrqEgbShQ"}`
	if string(b) != want {
		t.Fatalf("schema 2 written as %s, want %s", b, want)
	}
	var back Metadata
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	m.PrevHash = "" // not stored: the reader takes it from the event before
	if back != m || back.storesPrev() {
		t.Fatalf("schema 2 read back as %+v, want %+v", back, m)
	}

	for _, bad := range []string{`{"v":2,"h":"not base64!"}`, `{"v":2}`, `{"v":1,"h":"7g_FfdVS-WXpu0c0HC6hvY6lLA94eStzcdZrqEgbShQ"}`, `[]`} {
		if err := json.Unmarshal([]byte(bad), &back); err == nil {
			t.Errorf("%s read as %+v, want an error", bad, back)
		}
	}
	if _, err := json.Marshal(Metadata{Schema: 2, Hash: "zz"}); err == nil || !strings.Contains(err.Error(), "not hex") {
		t.Errorf("a hash that is not hex written: %v", err)
	}
}
