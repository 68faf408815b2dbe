// Package freeport picks loopback ports for programs that take a port by
// number: an agent's --api-addr, a runner's --tp-addrs, a demo's
// --base-port. It is the one picker; tests reach it through
// internal/testutil.
//
// A port from "127.0.0.1:0", closed and handed on, comes from the kernel's
// ephemeral range: any outgoing connection or :0 listener (another test's,
// another rank's dial) can take it before the program binds it, and now
// and then one did. The ports here come from below that range, where the
// kernel never hands out a port by itself: only a program that names one
// takes it. Each port is checked free (every port of a range bound at once,
// on every host asked for) and handed out once per process; the starting
// point is random, so that test binaries run side by side draw from
// different parts of the range.
package freeport

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// rangeFile holds the kernel's ephemeral range ("32768\t60999").
const rangeFile = "/proc/sys/net/ipv4/ip_local_port_range"

// defaultLow is the ephemeral range's low end where rangeFile cannot be
// read (other systems, a sandbox): Linux's default, and above the ranges of
// the BSDs and macOS (49152) it is below anyway.
const defaultLow = 32768

// minPort is the lowest port handed out: below it are the privileged ports
// and the well-known services.
const minPort = 1024

// tries bounds the ranges checked before giving up (each busy one skipped).
const tries = 1000

// Picker hands out ports below the ephemeral range. The zero value is not
// ready: use New. Safe for concurrent use.
type Picker struct {
	low  int          // the ephemeral range's low end: ports are below it
	next atomic.Int64 // the offset of the next range, counted down from low
}

// New returns a picker below low, the ephemeral range's low end (0: read
// it from the kernel, 32768 where it cannot be read).
func New(low int) *Picker {
	if low <= 0 {
		low = EphemeralLow()
	}
	p := &Picker{low: low}
	if room := low - minPort; room > 0 {
		p.next.Store(rand.Int64N(int64(room)))
	}
	return p
}

// process is the picker of this process: a port it hands out once is not
// handed out again, whichever package asks (a test binary's helpers and
// the code under test share it).
var process = New(0)

// Range is the first of n consecutive ports that were all free a moment
// ago on each of hosts (127.0.0.1 when none).
func Range(n int, hosts ...string) (int, error) { return process.Range(n, hosts...) }

// Addrs are n loopback addresses (127.0.0.1), each with a port that was
// free a moment ago.
func Addrs(n int) ([]string, error) { return process.Addrs(n) }

// Range is the first of n consecutive ports that were all free a moment
// ago on each of hosts (127.0.0.1 when none).
func (p *Picker) Range(n int, hosts ...string) (int, error) {
	if n < 1 {
		return 0, fmt.Errorf("freeport: %d ports asked for", n)
	}
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	room := p.low - minPort
	if room < n {
		return 0, fmt.Errorf("freeport: no room for %d ports between %d and the ephemeral range (from %d)", n, minPort, p.low)
	}
	for range tries {
		// Ranges are taken downwards from just below the ephemeral range,
		// wrapping at minPort.
		off := int((p.next.Add(int64(n)) - int64(n)) % int64(room-n+1))
		first := p.low - n - off
		if free(first, n, hosts) {
			return first, nil
		}
	}
	return 0, fmt.Errorf("freeport: no %d consecutive free ports below %d on %s", n, p.low, strings.Join(hosts, ", "))
}

// Addrs are n loopback addresses (127.0.0.1), each with a port that was
// free a moment ago.
func (p *Picker) Addrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		port, err := p.Range(1)
		if err != nil {
			return nil, err
		}
		out[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	return out, nil
}

// free binds every port of first..first+n-1 on every host at once, then
// lets them go: all of them were free together.
func free(first, n int, hosts []string) bool {
	var held []net.Listener
	defer func() {
		for _, ln := range held {
			ln.Close()
		}
	}()
	for port := first; port < first+n; port++ {
		for _, h := range hosts {
			ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
			if err != nil {
				return false
			}
			held = append(held, ln)
		}
	}
	return true
}

// EphemeralLow is the first port of the kernel's ephemeral range, 32768
// where it cannot be read.
func EphemeralLow() int {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return defaultLow
	}
	low, err := parseLow(string(b))
	if err != nil {
		return defaultLow
	}
	return low
}

// parseLow reads the low end of rangeFile's "low high".
func parseLow(s string) (int, error) {
	f := strings.Fields(s)
	if len(f) != 2 {
		return 0, fmt.Errorf("freeport: range %q", s)
	}
	low, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, err
	}
	if low <= minPort || low > 65535 {
		return 0, errors.New("freeport: no room below the ephemeral range")
	}
	return low, nil
}
