package telemetry

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const procNetDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:  123456     789    0    0    0     0          0         0   123456     789    0    0    0     0       0          0
  eth0: 18446744073709551615 2 0 0 0 0 0 0 300 4 0 0 0 0 0 0
`

func TestReadProcNetDev(t *testing.T) {
	p := filepath.Join(t.TempDir(), "dev")
	os.WriteFile(p, []byte(procNetDev), 0o644)
	got, err := readProcNetDev(p)
	if err != nil {
		t.Fatal(err)
	}
	if c := got["lo"]; c != (ifCounters{BytesRecv: 123456, PacketsRecv: 789, BytesSent: 123456, PacketsSent: 789}) {
		t.Errorf("lo = %+v", c)
	}
	if c := got["eth0"]; c.BytesRecv != 18446744073709551615 || c.BytesSent != 300 || c.PacketsSent != 4 {
		t.Errorf("eth0 = %+v", c)
	}
	bad := strings.Replace(procNetDev, "300 4", "x 4", 1)
	os.WriteFile(p, []byte(bad), 0o644)
	if _, err := readProcNetDev(p); err == nil || !strings.Contains(err.Error(), "line 4") {
		t.Errorf("malformed line: err = %v, want it to name line 4", err)
	}
}

func TestReadCountersRealMachine(t *testing.T) {
	got, err := readCounters()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got["lo"]; !ok {
		t.Errorf("no counters for lo: %v", got)
	}
}

func FuzzReadProcNetDev(f *testing.F) {
	f.Add([]byte(procNetDev))
	f.Add([]byte("a\nb\nx: 1 2 3\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "dev")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readProcNetDev(p)
		if err != nil && got != nil {
			t.Fatalf("error %v with a non-nil result", err)
		}
	})
}
