package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"math/big"
	"net"
	"testing"
	"time"
)

// TestCloseDoesNotWaitForAStuckPeer: closing a link whose peer stopped
// reading returns at once. It used to wait up to 5 s to send a
// close_notify that the full link could not take: in a
// 10-minute chaos run, a one-way partition held the master's member sweep
// (which closes the swept peer's links) for 5 s.
func TestCloseDoesNotWaitForAStuckPeer(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	a, b := net.Pipe() // unbuffered: a write blocks until the peer reads
	srv := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	cli := tls.Client(a, &tls.Config{InsecureSkipVerify: true})
	hs := make(chan error, 1)
	go func() { hs <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-hs; err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := newConn(cli, nil)
	closed := make(chan struct{})
	start := time.Now()
	go func() { c.close(); close(closed) }()
	select {
	case <-closed:
		t.Logf("closed in %v", time.Since(start))
	case <-time.After(2 * time.Second):
		t.Fatal("close still waits for a peer that does not read, after 2 s")
	}
	if _, err := cli.Write([]byte("x")); err == nil {
		t.Fatal("a write succeeded after close")
	}
}
