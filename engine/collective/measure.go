package collective

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"
)

// MeasureLoopback times two ranks in this process linked over loopback
// TCP: the median all-reduce of one decode row (values f32), the software
// cost the cost model adds the links' own latency to.
func MeasureLoopback(ctx context.Context, values, iters int) (reduce time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lns := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lns {
		if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return 0, err
		}
		defer lns[i].Close()
		addrs[i] = lns[i].Addr().String()
	}
	const token = "loopback-measure"
	type res struct {
		m   *Mesh
		err error
	}
	ch := make(chan res, 1)
	go func() {
		m, err := Connect(ctx, 1, 2, addrs, lns[1], token)
		ch <- res{m, err}
	}()
	m0, err := Connect(ctx, 0, 2, addrs, lns[0], token)
	r1 := <-ch
	if err == nil {
		err = r1.err
	}
	if err != nil {
		if m0 != nil {
			m0.Close()
		}
		if r1.m != nil {
			r1.m.Close()
		}
		return 0, fmt.Errorf("loopback group: %w", err)
	}
	m1 := r1.m
	defer m0.Close()
	defer m1.Close()
	// Rank 1 mirrors rank 0's all-reduces.
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, values)
		for range iters {
			if err := m1.AllReduce(buf); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]float32, values)
	var rs []time.Duration
	for range iters {
		t0 := time.Now()
		if err := m0.AllReduce(buf); err != nil {
			return 0, err
		}
		rs = append(rs, time.Since(t0))
	}
	if err := <-done; err != nil {
		return 0, err
	}
	return med(rs), nil
}

func med(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
