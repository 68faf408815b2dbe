// Package hop measures one hop between two processes over loopback TCP:
// what a message pays to go from a runner to its agent (or back), beyond
// the network. The speed benchmark (orrery speed) runs it against a child
// of itself.
package hop

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strings"
	"time"
)

// Serve listens on a loopback port, prints its address as one line on
// out, and echoes every connection until stop (the parent's pipe)
// closes.
func Serve(stop io.Reader, out io.Writer) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	if _, err := fmt.Fprintln(out, ln.Addr().String()); err != nil {
		return err
	}
	go func() {
		io.Copy(io.Discard, stop)
		ln.Close()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}

// Measure starts exe args (which must Serve), and times iters round trips
// of size bytes to it: half the median is one hop.
func Measure(ctx context.Context, exe string, args []string, size, iters int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return 0, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() {
		stdin.Close()
		cmd.Wait()
	}()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("echo child: %w", err)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", strings.TrimSpace(line))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	buf, back := make([]byte, size), make([]byte, size)
	ds := make([]time.Duration, 0, iters)
	for i := range iters + 10 {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, back); err != nil {
			return 0, err
		}
		if i >= 10 { // after a warmup
			ds = append(ds, time.Since(t0))
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2] / 2, nil
}
