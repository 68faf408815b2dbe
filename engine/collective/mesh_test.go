package collective

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

// group connects n ranks over loopback TCP with token, each listening on
// its own port.
func group(t testing.TB, n int, token string) []*Mesh {
	return connectGroup(t, n, nil, func(ctx context.Context, r int, addrs []string, ln net.Listener) (*Mesh, error) {
		return Connect(ctx, r, n, addrs, ln, token)
	})
}

// groupTLS is group with its links over TLS under secret (LinkTLS).
func groupTLS(t testing.TB, n int, secret []byte) []*Mesh {
	t.Helper()
	srv, cli, err := LinkTLS(secret)
	if err != nil {
		t.Fatal(err)
	}
	wrap := func(ln net.Listener) net.Listener { return tls.NewListener(ln, srv) }
	return connectGroup(t, n, wrap, func(ctx context.Context, r int, addrs []string, ln net.Listener) (*Mesh, error) {
		return ConnectWith(ctx, r, n, func(ctx context.Context, to int) (net.Conn, error) {
			return (&tls.Dialer{Config: cli}).DialContext(ctx, "tcp", addrs[to])
		}, ln, "t")
	})
}

// connectGroup listens on a loopback port per rank (wrapped by wrap, if
// set) and connects the n ranks at once with connect.
func connectGroup(t testing.TB, n int, wrap func(net.Listener) net.Listener,
	connect func(ctx context.Context, r int, addrs []string, ln net.Listener) (*Mesh, error)) []*Mesh {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[i], addrs[i] = ln, ln.Addr().String()
		if wrap != nil {
			lns[i] = wrap(ln)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := make([]*Mesh, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { ms[r], errs[r] = connect(ctx, r, addrs, lns[r]) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		t.Cleanup(ms[r].Close)
	}
	return ms
}

// Every rank ends with the same sum, bit for bit, added in rank order;
// small (decode) and large (prefill, past the sockets' buffers) vectors,
// many times in a row, with control messages between them. From 256 KiB
// a group of 3 or more reduces by scatter and gather (the bytes each rank
// sends say which way it went), to the same bits.
func TestAllReduceSumsInRankOrder(t *testing.T) {
	type tc struct{ n, size int }
	cases := []tc{{2, 1 << 20}, {3, 1 << 20}, {3, 1<<16 + 1}} // 4 MB: past the sockets' buffers; chunks of unequal size
	for _, n := range []int{2, 3, 4} {
		cases = append(cases, tc{n, 1}, tc{n, 2048}, tc{n, 1 << 16})
	}
	for _, c := range cases {
		n, size := c.n, c.size
		{
			t.Run(fmt.Sprintf("%d-ranks-%d", n, size), func(t *testing.T) {
				ms := group(t, n, "secret")
				const rounds = 3
				in := make([][][]float32, rounds)
				for k := range in {
					in[k] = make([][]float32, n)
					for r := range n {
						v := make([]float32, size)
						for i := range v {
							v[i] = float32(math.Sin(float64(1+i*7+r*13+k*31))) * float32(1+r)
						}
						in[k][r] = v
					}
				}
				out := make([][][]float32, n)
				errs := make([]error, n)
				var wg sync.WaitGroup
				for r, m := range ms {
					wg.Go(func() {
						for k := range rounds {
							if r == 0 {
								if err := m.Send([]byte(fmt.Sprint("step ", k))); err != nil {
									errs[r] = err
									return
								}
							} else {
								b, err := m.Recv(0)
								if err != nil || string(b) != fmt.Sprint("step ", k) {
									errs[r] = fmt.Errorf("control %q, %v", b, err)
									return
								}
							}
							buf := slices.Clone(in[k][r])
							if err := m.AllReduce(buf); err != nil {
								errs[r] = err
								return
							}
							out[r] = append(out[r], buf)
						}
					})
				}
				wg.Wait()
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				bytes := size * 4
				perRound := bytes * (n - 1) // direct exchange
				if n > 2 && bytes >= DefaultScatterMin {
					perRound = 0
					for r := range n { // rank 0 sends chunk r and its own chunk 0 to each r
						if r != 0 {
							perRound += ((r+1)*size/n - r*size/n + size/n) * 4
						}
					}
				}
				if got := ms[0].BytesSent; got != uint64(rounds*perRound) {
					t.Errorf("rank 0 sent %d bytes in %d all-reduces of %d, want %d", got, rounds, bytes, rounds*perRound)
				}
				for k := range rounds {
					want := slices.Clone(in[k][0])
					for r := 1; r < n; r++ {
						for i, x := range in[k][r] {
							want[i] += x
						}
					}
					for r := range n {
						if !slices.Equal(out[r][k], want) {
							t.Fatalf("round %d: rank %d's sum differs from the rank-order sum", k, r)
						}
					}
				}
			})
		}
	}
}

// A wrong token is refused; a rank that dies fails the others' all-reduce
// with ErrLinkLost instead of hanging; ranks out of step say so.
func TestMeshFailures(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			writeHello(c, 1, "wrong")
			<-ctx.Done() // held open until Connect has given up
			c.Close()
		}
	}()
	if _, err := Connect(ctx, 0, 2, []string{ln.Addr().String(), ""}, ln, "secret"); err == nil {
		t.Fatal("a link with the wrong token was accepted")
	}

	ms := group(t, 2, "secret")
	done := make(chan error, 1)
	sent := ms[0].SentTo(1)
	go func() { done <- ms[0].AllReduce(make([]float32, 2048)) }()
	// Rank 0 is in the all-reduce, its part sent, when rank 1 dies.
	testutil.WaitFor(t, "rank 0's part of the all-reduce sent", func() bool { return ms[0].SentTo(1) > sent })
	ms[1].Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLinkLost) {
			t.Fatalf("all-reduce with a dead peer: %v, want ErrLinkLost", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("all-reduce still waits for a dead peer")
	}

	ms = group(t, 2, "secret")
	errs := make(chan error, 2)
	go func() { errs <- ms[0].AllReduce(make([]float32, 10)) }()
	go func() { errs <- ms[1].AllReduce(make([]float32, 11)) }()
	for range 2 {
		if err := <-errs; err == nil {
			t.Fatal("all-reduces of different lengths both succeeded")
		}
	}
}

// BenchmarkAllReduce2048 is one decode row (2048 f32) between 2 ranks on
// loopback, in one process; it reports the p50 and p99 of each call.
func BenchmarkAllReduce2048(b *testing.B) { benchPair(b, 2048, group(b, 2, "secret")) }

// BenchmarkAllReduce2048TLS is the same over TLS under a link secret, as
// a group's direct links between machines run.
func BenchmarkAllReduce2048TLS(b *testing.B) {
	benchPair(b, 2048, groupTLS(b, 2, []byte("a secret of the group, 32 bytes.")))
}

// BenchmarkAllReduceLogits is half the 1b preset's vocabulary (16,000
// f32) between 2 ranks: what gathering a head split by vocabulary would
// send each step (an all-gather of the halves: the same bytes each way).
func BenchmarkAllReduceLogits(b *testing.B) { benchPair(b, 16000, group(b, 2, "secret")) }

// benchPair times all-reduces of n f32 between the 2 ranks of ms.
func benchPair(b *testing.B, n int, ms []*Mesh) {
	times := make([]time.Duration, 0, b.N)
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, n)
		for range b.N {
			if err := ms[1].AllReduce(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]float32, n)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := ms[0].AllReduce(buf); err != nil {
			b.Fatal(err)
		}
		times = append(times, time.Since(start))
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
	b.ReportMetric(float64(times[len(times)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds()), "p99-µs")
}

// A rank that stays silent (stopped, or cut off without a reset) fails
// the others' all-reduce after ReduceTimeout instead of hanging them; a
// follower idle between requests longer than that is not cut off.
func TestSilentRankTimesOut(t *testing.T) {
	ms := group(t, 2, "secret")
	ms[0].ReduceTimeout = 300 * time.Millisecond
	ms[1].ReduceTimeout = 300 * time.Millisecond
	done := make(chan error, 1)
	go func() { done <- ms[0].AllReduce(make([]float32, 2048)) }()
	// Rank 1 answers once, then idles past the timeout in Recv.
	if err := ms[1].AllReduce(make([]float32, 2048)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { _, err := ms[1].Recv(0); got <- err }()
	time.Sleep(600 * time.Millisecond)
	if err := ms[0].Send([]byte("late step")); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("an idle follower was cut off: %v", err)
	}
	// Now rank 1 stays silent in an all-reduce.
	start := time.Now()
	err := ms[0].AllReduce(make([]float32, 2048))
	if !errors.Is(err, ErrLinkLost) {
		t.Fatalf("all-reduce with a silent rank: %v, want ErrLinkLost", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the silent rank held the all-reduce %v", d)
	}
}

// The loopback measurement links two ranks, all-reduces, and gives a
// median that is a real duration.
func TestMeasureLoopback(t *testing.T) {
	d, err := MeasureLoopback(context.Background(), 2048, 50)
	if err != nil || d <= 0 || d > time.Second {
		t.Fatalf("loopback all-reduce %v, %v", d, err)
	}
}

// BenchmarkAllReducePrefill is a prefill's rows of 2048 f32 (8 rows: 64
// KiB; 32: 256 KiB; 128: 1 MiB) among 3 ranks on loopback, in one
// process, by direct exchange and by reduce-scatter then all-gather.
func BenchmarkAllReducePrefill(b *testing.B) {
	for _, rows := range []int{8, 32, 128} {
		for _, c := range []struct {
			name string
			min  int
		}{{"exchange", -1}, {"scatter-gather", 1}} {
			b.Run(fmt.Sprintf("%d-rows-%s", rows, c.name), func(b *testing.B) {
				ms := group(b, 3, "secret")
				for _, m := range ms {
					m.ScatterMin = c.min
				}
				errs := make(chan error, 2)
				for _, m := range ms[1:] {
					go func() {
						buf := make([]float32, rows*2048)
						for range b.N {
							if err := m.AllReduce(buf); err != nil {
								errs <- err
								return
							}
						}
						errs <- nil
					}()
				}
				buf := make([]float32, rows*2048)
				b.SetBytes(int64(len(buf) * 4))
				b.ResetTimer()
				for range b.N {
					if err := ms[0].AllReduce(buf); err != nil {
						b.Fatal(err)
					}
				}
				for range 2 {
					if err := <-errs; err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(ms[0].BytesSent)/float64(b.N), "sent-B/op")
			})
		}
	}
}
