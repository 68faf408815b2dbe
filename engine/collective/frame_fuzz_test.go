package collective

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"
)

// FuzzLinkRead: a link reads any bytes as frames without panicking, and
// only accepts frames of the type, sequence and length asked for.
func FuzzLinkRead(f *testing.F) {
	frame := func(typ byte, seq uint32, payload []byte) []byte {
		b := []byte{typ}
		b = binary.LittleEndian.AppendUint32(b, seq)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(payload)))
		return append(b, payload...)
	}
	f.Add(frame(frameReduce, 1, make([]byte, 8)), true)
	f.Add(frame(frameControl, 0, []byte("step")), false)
	f.Add(frame(frameReduce, 1, make([]byte, 3)), true)
	f.Add([]byte{1, 2, 3}, false)
	f.Fuzz(func(t *testing.T, data []byte, reduce bool) {
		l := &link{br: bufio.NewReader(bytes.NewReader(data))}
		typ, want := frameControl, -1
		if reduce {
			typ, want = frameReduce, 8
		}
		b, err := l.read(typ, 1, want, nil)
		if err != nil {
			return
		}
		if reduce && len(b) != 8 || len(data) < headerLen || data[0] != typ {
			t.Fatalf("accepted a frame of %d bytes from %x", len(b), data)
		}
	})
}

// FuzzHello: a listener reads any first bytes of a link without
// panicking, and accepts only the right token.
func FuzzHello(f *testing.F) {
	var good bytes.Buffer
	good.WriteString(helloMagic)
	binary.Write(&good, binary.LittleEndian, uint32(1))
	binary.Write(&good, binary.LittleEndian, uint16(6))
	good.WriteString("secret")
	f.Add(good.Bytes())
	f.Add([]byte("ORTP\x01\x00\x00\x00\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		defer a.Close()
		defer b.Close()
		go func() {
			a.SetWriteDeadline(time.Now().Add(time.Second))
			a.Write(data)
			a.Close() // the reader sees the end, not a wait
		}()
		if _, err := readHello(b, "secret"); err == nil && !bytes.Contains(data, []byte("secret")) {
			t.Fatalf("accepted a hello without the token: %x", data)
		}
	})
}

// TestReadGrowing: a payload larger than its first storage arrives whole
// across the doublings, and a short one is an error, not a short frame.
func TestReadGrowing(t *testing.T) {
	for _, n := range []int{0, 1, 64 << 10, 64<<10 + 1, 300 << 10} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		got, err := readGrowing(bytes.NewReader(want), n)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: got %d bytes, err %v", n, len(got), err)
		}
		if n > 0 {
			if _, err := readGrowing(bytes.NewReader(want[:n-1]), n); err == nil {
				t.Fatalf("%d bytes: read a frame one byte short", n)
			}
		}
	}
}

// TestLinkTLS: two ends of one secret complete the handshake and sum over
// it; an end of another secret is refused, whichever side it is on.
func TestLinkTLS(t *testing.T) {
	srv, cli, err := LinkTLS([]byte("a secret of the group, 32 bytes."))
	if err != nil {
		t.Fatal(err)
	}
	osrv, ocli, err := LinkTLS([]byte("another group's secret, 32 bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := LinkTLS([]byte("short")); err == nil {
		t.Error("a 5-byte secret accepted")
	}
	// Over loopback TCP: both ends of an all-reduce write before they
	// read, which a net.Pipe (no buffer) would deadlock.
	pair := func(s, c *tls.Config) (net.Conn, net.Conn, error) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, nil, err
		}
		defer ln.Close()
		b, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return nil, nil, err
		}
		a, err := ln.Accept()
		if err != nil {
			return nil, nil, err
		}
		a.SetDeadline(time.Now().Add(10 * time.Second))
		b.SetDeadline(time.Now().Add(10 * time.Second))
		defer a.SetDeadline(time.Time{})
		defer b.SetDeadline(time.Time{})
		ts, tc := tls.Server(a, s), tls.Client(b, c)
		errs := make(chan error, 1)
		go func() { errs <- ts.Handshake() }()
		err = tc.Handshake()
		if serr := <-errs; err == nil {
			err = serr
		}
		if err != nil {
			a.Close()
			b.Close()
		}
		return ts, tc, err
	}
	for _, c := range []struct {
		name string
		s, c *tls.Config
	}{{"client of another secret", srv, ocli}, {"server of another secret", osrv, cli}} {
		if _, _, err := pair(c.s, c.c); err == nil {
			t.Errorf("%s: handshake succeeded", c.name)
		}
	}
	a, b, err := pair(srv, cli)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	// And a group sums over such links.
	ms := groupTLS(t, 2, []byte("a secret of the group, 32 bytes."))
	errs := make([]error, 2)
	var wg sync.WaitGroup
	bufs := [][]float32{{1, 2, 3}, {10, 20, 30}}
	for r := range 2 {
		wg.Go(func() { errs[r] = ms[r].AllReduce(bufs[r]) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil || bufs[0][2] != 33 || bufs[1][0] != 11 {
		t.Fatalf("all-reduce over TLS: %v %v, %v", bufs[0], bufs[1], errs)
	}
}
