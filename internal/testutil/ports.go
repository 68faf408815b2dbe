package testutil

import (
	"net"
	"strconv"
	"testing"

	"github.com/orrery-cluster/orrery/internal/freeport"
)

// FreeBasePort returns a base port p such that p..p+n-1 were all free a
// moment ago on 127.0.0.1 (and on each of hosts, when given), for programs
// that take ports by number. The ports lie below the kernel's ephemeral
// range, so no outgoing connection or :0 listener takes one meanwhile
// (internal/freeport).
func FreeBasePort(tb testing.TB, n int, hosts ...string) int {
	tb.Helper()
	p, err := freeport.Range(n, append([]string{"127.0.0.1"}, hosts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	return p
}

// FreeAddr is a loopback address whose port was free a moment ago, for a
// program that listens where it is told (FreeBasePort's ports).
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreeBasePort(tb, 1)))
}

// FreeAddrs are n such addresses.
func FreeAddrs(tb testing.TB, n int) []string {
	tb.Helper()
	out := make([]string, n)
	for i := range out {
		out[i] = FreeAddr(tb)
	}
	return out
}
