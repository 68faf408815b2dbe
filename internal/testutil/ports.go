package testutil

import (
	"math/rand/v2"
	"net"
	"strconv"
	"testing"
)

// FreeBasePort returns a base port p such that p..p+n-1 were all free on
// 127.0.0.1 a moment ago, for tests of programs that take a base port.
func FreeBasePort(tb testing.TB, n int) int {
	tb.Helper()
	for range 100 {
		base := 40000 + rand.IntN(20000-n)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(base+i)))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base
		}
	}
	tb.Fatalf("no %d consecutive free ports in 40000-60000", n)
	return 0
}
