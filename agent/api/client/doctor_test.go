package client

import (
	"strings"
	"testing"
)

func TestDoctorRenderEdgeCases(t *testing.T) {
	var b strings.Builder
	var r DoctorReport
	r.API = "http://127.0.0.1:1"
	r.Health.NodeID = "solo"
	r.Discovery.PeersFound = 1
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Node       solo\n", "Master     none elected yet\n", "Members    0 ", "Discovery  no source enabled\n", "✓ found 1 peer\n"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
}
