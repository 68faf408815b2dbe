package testutil

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/freeport"
)

// fakeTB records failures instead of failing the real test.
type fakeTB struct {
	testing.TB
	failed   atomic.Bool
	msg      string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed.Store(true)
	f.msg = format
}
func (f *fakeTB) Errorf(format string, args ...any) { f.Fatalf(format, args...) }
func (f *fakeTB) Cleanup(fn func())                 { f.cleanups = append(f.cleanups, fn) }

func TestWaitFor(t *testing.T) {
	var n atomic.Int32
	go func() {
		time.Sleep(30 * time.Millisecond)
		n.Store(1)
	}()
	WaitFor(t, "the flag", func() bool { return n.Load() == 1 })

	f := &fakeTB{}
	WaitForTimeout(f, 50*time.Millisecond, "never", func() bool { return false })
	if !f.failed.Load() || !strings.Contains(f.msg, "timed out") {
		t.Fatalf("WaitForTimeout did not fail: %q", f.msg)
	}
}

func TestNever(t *testing.T) {
	Never(t, 30*time.Millisecond, "nothing", func() bool { return false })
	f := &fakeTB{}
	Never(f, time.Second, "it", func() bool { return true })
	if !f.failed.Load() {
		t.Fatal("Never did not fail on a true condition")
	}
}

func TestCheckLeaks(t *testing.T) {
	// A goroutine started after CheckLeaks and still running is reported.
	f := &fakeTB{}
	checkLeaks(f, 100*time.Millisecond)
	stop := make(chan struct{})
	go func() { <-stop }()
	for _, fn := range f.cleanups {
		fn()
	}
	if !f.failed.Load() {
		t.Fatal("a running goroutine was not reported")
	}
	close(stop)

	// One that ends in the grace period is not.
	g := &fakeTB{}
	CheckLeaks(g)
	done := make(chan struct{})
	go func() { time.Sleep(20 * time.Millisecond); close(done) }()
	for _, fn := range g.cleanups {
		fn()
	}
	<-done
	if g.failed.Load() {
		t.Fatal("a goroutine that finished was reported")
	}
}

func TestClock(t *testing.T) {
	start := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	c := NewClock(start)
	if got := c.Now(); !got.Equal(start) {
		t.Fatalf("Now = %v, want %v", got, start)
	}
	if got := c.Advance(90 * time.Second); !got.Equal(start.Add(90*time.Second)) || !c.Now().Equal(got) {
		t.Fatalf("Advance = %v, Now = %v; want %v", got, c.Now(), start.Add(90*time.Second))
	}
}

// FreeAddr's ports lie below the ephemeral range and are not handed out
// twice; FreeBasePort's range is free on every host asked for.
func TestFreePorts(t *testing.T) {
	low := freeport.EphemeralLow()
	seen := map[string]bool{}
	for _, a := range FreeAddrs(t, 4) {
		_, p, err := net.SplitHostPort(a)
		port, _ := strconv.Atoi(p)
		if err != nil || port >= low || seen[p] {
			t.Fatalf("FreeAddrs gave %s: want a port below %d, once", a, low)
		}
		seen[p] = true
	}
	base := FreeBasePort(t, 3, "127.0.0.5")
	for port := base; port < base+3; port++ {
		for _, h := range []string{"127.0.0.1", "127.0.0.5"} {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				t.Fatalf("port %d of FreeBasePort(3) on %s: %v", port, h, err)
			}
			ln.Close()
		}
	}
}

func TestWriteTree(t *testing.T) {
	root := WriteTree(t, map[string]string{"etc/hostname": "rack-7\n", "sys/class/hwmon/hwmon0/temp1_input": "42000\n"})
	for p, want := range map[string]string{"etc/hostname": "rack-7\n", "sys/class/hwmon/hwmon0/temp1_input": "42000\n"} {
		if b, err := os.ReadFile(filepath.Join(root, p)); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}
}
