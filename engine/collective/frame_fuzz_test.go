package collective

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"net"
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
