package runnerapi

import (
	"encoding/binary"
	"encoding/json"
	"net"
	"testing"
)

func authFrame(payload []byte) []byte {
	b := []byte{AuthFrame, 0, 0, 0, 0}
	binary.LittleEndian.PutUint32(b[1:], uint32(len(payload)))
	return append(b, payload...)
}

// readAuth runs ReadAuth over a pipe fed data.
func readAuth(data []byte, token string) error {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		b.Write(data)
		b.Close()
	}()
	return ReadAuth(a, token)
}

// ReadAuth is the first read on a rank port, before anyone is known:
// whatever the bytes, it passes only the runner's own token, and what
// SendAuth writes passes.
func FuzzReadAuth(f *testing.F) {
	ok, _ := json.Marshal(authHello{Token: "tok"})
	f.Add(authFrame(ok))
	f.Add([]byte{AuthFrame, 0xff, 0xff, 0xff, 0x7f})
	f.Add(authFrame([]byte(`{"token":"tok","instance":"x"}`)))
	f.Fuzz(func(t *testing.T, data []byte) {
		if readAuth(data, "tok") != nil {
			return
		}
		var h authHello
		n := int(binary.LittleEndian.Uint32(data[1:]))
		if data[0] != AuthFrame || json.Unmarshal(data[5:5+n], &h) != nil || h.Token != "tok" {
			t.Fatalf("ReadAuth passed %q", data)
		}
	})
}

func TestSendAuthReadAuth(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		SendAuth(b, "tok")
		b.Close()
	}()
	if err := ReadAuth(a, "tok"); err != nil {
		t.Fatalf("ReadAuth of SendAuth's hello: %v", err)
	}
	if err := readAuth(authFrame([]byte(`{"token":"other"}`)), "tok"); err == nil {
		t.Fatal("a wrong token passed")
	}
}
