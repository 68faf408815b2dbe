package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxFrame is the default cap on a frame's length (type + payload). Event
// batches and state snapshots are the largest messages.
const MaxFrame = 8 << 20

// Errors a reader can get from ReadFrame, besides I/O errors.
var (
	ErrFrameTooLarge = errors.New("frame too large")
	ErrEmptyFrame    = errors.New("empty frame")
)

// WriteFrame writes one frame. It refuses payloads that would exceed
// MaxFrame, so a writer never sends what its peer must drop.
func WriteFrame(w io.Writer, typ Type, payload []byte) error {
	n := 1 + len(payload)
	if n > MaxFrame {
		return fmt.Errorf("write %s: %w: %d bytes, limit %d", typ, ErrFrameTooLarge, n, MaxFrame)
	}
	buf := make([]byte, 5+len(payload))
	binary.BigEndian.PutUint32(buf, uint32(n))
	buf[4] = byte(typ)
	copy(buf[5:], payload)
	if _, err := w.Write(buf); err != nil {
		return fmt.Errorf("write %s: %w", typ, err)
	}
	return nil
}

// ReadFrame reads one frame whose length is at most max (≤ 0: MaxFrame).
func ReadFrame(r io.Reader, max int) (Type, []byte, error) {
	if max <= 0 {
		max = MaxFrame
	}
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err // io.EOF between frames is a clean close
	}
	n := binary.BigEndian.Uint32(hdr[:])
	switch {
	case n == 0:
		return 0, nil, ErrEmptyFrame
	case uint64(n) > uint64(max):
		return 0, nil, fmt.Errorf("%w: %d bytes, limit %d", ErrFrameTooLarge, n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, fmt.Errorf("read frame body (%d bytes): %w", n, io.ErrUnexpectedEOF)
	}
	return Type(buf[0]), buf[1:], nil
}
