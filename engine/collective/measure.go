package collective

import (
	"context"
	"fmt"
	"net"
	"slices"
	"time"
)

// MeasureLoopback times two ranks in this process linked over loopback
// TCP: the median all-reduce of one decode row (values f32), and half the
// median round trip of a small control message (one hop's software cost).
// The cost model adds the links' own latency to these.
func MeasureLoopback(ctx context.Context, values, iters int) (reduce, hop time.Duration, err error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lns := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lns {
		if lns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return 0, 0, err
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
		return 0, 0, fmt.Errorf("loopback group: %w", err)
	}
	m1 := r1.m
	defer m0.Close()
	defer m1.Close()
	// Rank 1 mirrors rank 0: iters all-reduces, then echoes iters
	// control messages.
	done := make(chan error, 1)
	go func() {
		buf := make([]float32, values)
		for range iters {
			if err := m1.AllReduce(buf); err != nil {
				done <- err
				return
			}
		}
		for range iters {
			b, err := m1.Recv(0)
			if err == nil {
				err = m1.Send(b)
			}
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	buf := make([]float32, values)
	var rs, hs []time.Duration
	for range iters {
		t0 := time.Now()
		if err := m0.AllReduce(buf); err != nil {
			return 0, 0, err
		}
		rs = append(rs, time.Since(t0))
	}
	msg := make([]byte, 64)
	for range iters {
		t0 := time.Now()
		if err := m0.Send(msg); err != nil {
			return 0, 0, err
		}
		if _, err := m0.Recv(1); err != nil {
			return 0, 0, err
		}
		hs = append(hs, time.Since(t0)/2)
	}
	if err := <-done; err != nil {
		return 0, 0, err
	}
	return med(rs), med(hs), nil
}

func med(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
