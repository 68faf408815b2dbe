package collective

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Direct links: each rank listens, and dials every rank below it; the
// dialler says who it is and presents the group's token. This is the
// path on one machine (runner to runner on loopback); across machines the
// agents' TLS links carry the same streams.

const (
	helloMagic = "ORTP"
	// ackMagic answers a hello: a relay may accept a link it cannot
	// complete, so the dialler waits for the far rank itself.
	ackMagic = "ORTA"
)

// maxToken bounds a hello's token.
const maxToken = 256

// Connect builds rank's links of an n-rank group: it accepts ranks above
// it on ln and dials the ones below at addrs[r] (retrying until ctx ends,
// since they may not listen yet). token authenticates every link.
func Connect(ctx context.Context, rank, n int, addrs []string, ln net.Listener, token string) (*Mesh, error) {
	if n < 2 || rank < 0 || rank >= n || len(addrs) != n {
		return nil, fmt.Errorf("connect: rank %d of %d with %d addresses", rank, n, len(addrs))
	}
	var d net.Dialer
	return ConnectWith(ctx, rank, n, func(ctx context.Context, r int) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addrs[r])
	}, ln, token)
}

// ConnectWith is Connect with the links to the ranks below made by dial
// (through the agents, between machines), retried until ctx ends. ln
// yields the links from the ranks above, authenticated by whoever made
// them; the group's hello and token follow on each.
func ConnectWith(ctx context.Context, rank, n int, dial func(ctx context.Context, r int) (net.Conn, error), ln net.Listener, token string) (*Mesh, error) {
	if n < 2 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("connect: rank %d of %d", rank, n)
	}
	if len(token) > maxToken {
		return nil, fmt.Errorf("connect: a token of %d bytes, at most %d", len(token), maxToken)
	}
	conns := make([]net.Conn, n)
	fail := func(err error) (*Mesh, error) {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, err
	}
	accepted := make(chan error, 1)
	if rank < n-1 {
		go func() { accepted <- acceptAbove(ctx, rank, n, ln, token, conns) }()
	} else {
		accepted <- nil
	}
	for r := 0; r < rank; r++ {
		c, err := dialRank(ctx, func(ctx context.Context) (net.Conn, error) { return dial(ctx, r) }, rank, r, token)
		if err != nil {
			ln.Close() // ends the accepting
			<-accepted
			return fail(fmt.Errorf("connect to rank %d: %w", r, err))
		}
		conns[r] = c
	}
	if err := <-accepted; err != nil {
		return fail(err)
	}
	return New(rank, n, conns)
}

func acceptAbove(ctx context.Context, rank, n int, ln net.Listener, token string, conns []net.Conn) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for want := n - 1 - rank; want > 0; {
		c, err := ln.Accept()
		if err != nil {
			return fmt.Errorf("accept the ranks above %d: %w", rank, err)
		}
		from, err := readHello(c, token)
		if err == nil && (from <= rank || from >= n || conns[from] != nil) {
			err = fmt.Errorf("a hello from rank %d", from)
		}
		if err == nil {
			err = writeAck(c, rank)
		}
		if err != nil {
			c.Close() // a stranger, or a bad hello: not one of ours
			continue
		}
		conns[from] = c
		want--
	}
	return nil
}

func dialRank(ctx context.Context, dial func(context.Context) (net.Conn, error), rank, to int, token string) (net.Conn, error) {
	// From 20 ms (ranks on one machine come up together) to 250 ms (a
	// rank still loading, whose agent each attempt asks anew).
	wait := 20 * time.Millisecond
	for {
		c, err := dial(ctx)
		if err == nil {
			if err = writeHello(c, rank, token); err == nil {
				err = readAck(c, to)
			}
			if err == nil {
				return c, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

func writeHello(c net.Conn, rank int, token string) error {
	b := make([]byte, 0, 4+4+2+len(token))
	b = append(b, helloMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(rank))
	b = binary.LittleEndian.AppendUint16(b, uint16(len(token)))
	b = append(b, token...)
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write(b)
	return err
}

func writeAck(c net.Conn, rank int) error {
	b := binary.LittleEndian.AppendUint32([]byte(ackMagic), uint32(rank))
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	defer c.SetWriteDeadline(time.Time{})
	_, err := c.Write(b)
	return err
}

// readAck waits for rank to's answer to our hello.
func readAck(c net.Conn, to int) error {
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var b [8]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return fmt.Errorf("no answer from rank %d: %w", to, err)
	}
	if string(b[:4]) != ackMagic || int(binary.LittleEndian.Uint32(b[4:])) != to {
		return fmt.Errorf("rank %d answered %q", to, b[:])
	}
	return nil
}

// readHello reads a dialler's hello and checks its token; it returns the
// dialler's rank.
func readHello(c net.Conn, token string) (int, error) {
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var h [10]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, err
	}
	if string(h[:4]) != helloMagic {
		return 0, errors.New("not a tensor-parallel hello")
	}
	n := int(binary.LittleEndian.Uint16(h[8:]))
	if n > maxToken {
		return 0, fmt.Errorf("a token of %d bytes", n)
	}
	tok := make([]byte, n)
	if _, err := io.ReadFull(c, tok); err != nil {
		return 0, err
	}
	if subtle.ConstantTimeCompare(tok, []byte(token)) != 1 {
		return 0, errors.New("wrong token")
	}
	return int(binary.LittleEndian.Uint32(h[4:])), nil
}
