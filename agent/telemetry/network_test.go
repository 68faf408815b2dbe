package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/orrery-cluster/orrery/agent/state"
)

func TestNetworkSamplerRealMachine(t *testing.T) {
	n := NewNetworkSampler("n1")
	ctx := context.Background()
	first, err := n.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lo := findLoopback(t, first.(state.NodeNetworkMeasured).Network)
	if lo.SendMBps != nil {
		t.Error("first sample has a rate without a previous sample")
	}
	if len(lo.Addresses) == 0 || lo.MTU <= 0 || !lo.Up {
		t.Errorf("loopback = %+v", lo)
	}
	// Push real bytes over loopback so its counters move.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(make([]byte, 1<<20))
	}))
	defer srv.Close()
	for i := 0; i < 4; i++ {
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	second, err := n.Sample(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lo2 := findLoopback(t, second.(state.NodeNetworkMeasured).Network)
	if lo2.BytesSent < lo.BytesSent+1<<20 {
		t.Errorf("loopback bytesSent went %d → %d after sending ≥ 1 MiB", lo.BytesSent, lo2.BytesSent)
	}
	if lo2.SendMBps == nil || *lo2.SendMBps <= 0 {
		t.Errorf("sendMBps = %v, want > 0", ptr(lo2.SendMBps))
	}
}

func findLoopback(t *testing.T, nn state.NodeNetwork) state.NetworkInterface {
	t.Helper()
	for _, i := range nn.Interfaces {
		if i.Kind == KindLoopback {
			return i
		}
	}
	ifs, _ := net.Interfaces()
	t.Fatalf("no loopback interface in %+v (OS lists %v)", nn.Interfaces, ifs)
	return state.NetworkInterface{}
}

func TestDiskSamplerRealMachine(t *testing.T) {
	dir := t.TempDir()
	ev, err := (&DiskSampler{NodeID: "n1", Path: dir}).Sample(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	d := ev.(state.NodeDiskMeasured).Disk
	if d.Path != dir || d.Total == nil || d.Available == nil || d.Total.InBytes == 0 || d.Available.InBytes > d.Total.InBytes {
		t.Errorf("disk = %+v", d)
	}
	if _, err := (&DiskSampler{NodeID: "n1", Path: dir + "/missing"}).Sample(context.Background()); err == nil {
		t.Error("a missing path sampled without error")
	}
}
