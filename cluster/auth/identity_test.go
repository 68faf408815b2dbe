package auth

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

var testNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newIdentity(t *testing.T, k Key, nodeID string) *Identity {
	t.Helper()
	id, err := NewNodeCert(k, nodeID, time.Now())
	if err != nil {
		t.Fatalf("NewNodeCert(%q): %v", nodeID, err)
	}
	return id
}

// side is one end of an exchange: its connection state and the first
// error it met in the handshake or the one-byte exchange that follows.
type side struct {
	state tls.ConnectionState
	err   error
}

// exchange runs a real TLS handshake over loopback TCP, then the client
// sends one byte and the server echoes it. In TLS 1.3 the client finishes
// its handshake before the server has checked the client certificate, so
// a server-side rejection reaches the client on that read.
func exchange(t *testing.T, serverCfg, clientCfg *tls.Config) (server, client side) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()

	done := make(chan side, 1)
	go func() {
		var s side
		defer func() { done <- s }()
		raw, err := ln.Accept()
		if err != nil {
			s.err = err
			return
		}
		defer raw.Close()
		raw.SetDeadline(deadline)
		c := tls.Server(raw, serverCfg)
		if s.err = c.HandshakeContext(ctx); s.err != nil {
			return
		}
		s.state = c.ConnectionState()
		buf := make([]byte, 1)
		if _, s.err = io.ReadFull(c, buf); s.err != nil {
			return
		}
		_, s.err = c.Write(buf)
	}()

	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	raw.SetDeadline(deadline)
	c := tls.Client(raw, clientCfg)
	client.err = c.HandshakeContext(ctx)
	if client.err == nil {
		client.state = c.ConnectionState()
		buf := []byte{'x'}
		if _, client.err = c.Write(buf); client.err == nil {
			buf[0] = 0
			if _, client.err = io.ReadFull(c, buf); client.err == nil && buf[0] != 'x' {
				client.err = errors.New("echo mismatch")
			}
		}
	}
	if client.err != nil {
		raw.Close() // let a server still waiting for us give up now
	}
	return <-done, client
}

func TestHandshakeSameKey(t *testing.T) {
	k := GenerateKey()
	a := newIdentity(t, k, "node-a")
	b := newIdentity(t, k, "node-b")
	for _, tc := range []struct{ server, client *Identity }{{a, b}, {b, a}} {
		srv, cli := exchange(t, tc.server.ServerConfig(), tc.client.ClientConfig())
		if srv.err != nil || cli.err != nil {
			t.Fatalf("%s serving %s: server error %v, client error %v", tc.server.NodeID(), tc.client.NodeID(), srv.err, cli.err)
		}
		for _, s := range []struct {
			name  string
			state tls.ConnectionState
			want  string
		}{{"server", srv.state, tc.client.NodeID()}, {"client", cli.state, tc.server.NodeID()}} {
			if s.state.Version != tls.VersionTLS13 {
				t.Errorf("%s: version %#x, want TLS 1.3", s.name, s.state.Version)
			}
			got, err := PeerNodeID(s.state)
			if err != nil || got != s.want {
				t.Errorf("%s: PeerNodeID = %q, %v; want %q", s.name, got, err, s.want)
			}
		}
	}
}

func TestHandshakeDifferentKeys(t *testing.T) {
	a := newIdentity(t, GenerateKey(), "node-a")
	b := newIdentity(t, GenerateKey(), "node-b")
	for _, tc := range []struct{ server, client *Identity }{{a, b}, {b, a}} {
		srv, cli := exchange(t, tc.server.ServerConfig(), tc.client.ClientConfig())
		if srv.err == nil || cli.err == nil {
			t.Fatalf("different keys: server error %v, client error %v; want both to fail", srv.err, cli.err)
		}
		t.Logf("server error: %v; client error: %v", srv.err, cli.err)
		if _, ok := errors.AsType[x509.UnknownAuthorityError](cli.err); !ok {
			t.Errorf("client error %v: want x509.UnknownAuthorityError", cli.err)
		}
		if !IsKeyMismatch(cli.err) {
			t.Errorf("IsKeyMismatch(client error %q) = false", cli.err)
		}
		if !IsKeyMismatch(srv.err) {
			t.Errorf("IsKeyMismatch(server error %q) = false", srv.err)
		}
		if _, err := PeerNodeID(srv.state); err == nil {
			t.Error("server has a peer node id after a failed handshake")
		}
	}
}

// A client that skips verification but presents a certificate from another
// key is caught by the server; the client only learns it from the alert.
func TestHandshakeServerRejectsForeignClient(t *testing.T) {
	a := newIdentity(t, GenerateKey(), "node-a")
	b := newIdentity(t, GenerateKey(), "node-b")
	cfg := b.ClientConfig()
	cfg.InsecureSkipVerify = true
	// Go clients send no certificate when its issuer is not among the CAs
	// the server asks for; force it, as a foreign implementation might.
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &b.cert, nil }
	srv, cli := exchange(t, a.ServerConfig(), cfg)
	if srv.err == nil || cli.err == nil {
		t.Fatalf("server error %v, client error %v; want both to fail", srv.err, cli.err)
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](srv.err); !ok {
		t.Errorf("server error %v: want x509.UnknownAuthorityError", srv.err)
	}
	if !IsKeyMismatch(srv.err) || !IsKeyMismatch(cli.err) {
		t.Errorf("IsKeyMismatch: server %q → %v, client %q → %v; want both true",
			srv.err, IsKeyMismatch(srv.err), cli.err, IsKeyMismatch(cli.err))
	}
}

func TestHandshakeClientWithoutCertificate(t *testing.T) {
	a := newIdentity(t, GenerateKey(), "node-a")
	srv, cli := exchange(t, a.ServerConfig(), &tls.Config{InsecureSkipVerify: true})
	if srv.err == nil {
		t.Fatal("server accepted a client without a certificate")
	}
	if cli.err == nil {
		t.Fatal("client without a certificate exchanged data")
	}
	if _, err := PeerNodeID(srv.state); err == nil {
		t.Error("server has a peer node id for a client without a certificate")
	}
	// That is a misconfigured or foreign client, not another cluster key.
	if IsKeyMismatch(srv.err) || IsKeyMismatch(cli.err) {
		t.Errorf("IsKeyMismatch true for a missing certificate: server %q, client %q", srv.err, cli.err)
	}
}

func TestIsKeyMismatchNegatives(t *testing.T) {
	for _, err := range []error{
		nil,
		io.EOF,
		errors.New("x509: certificate signed by unknown authority"), // text alone is not enough
		&tls.CertificateVerificationError{Err: x509.CertificateInvalidError{Reason: x509.Expired}},
		&net.OpError{Op: "remote error", Err: tls.AlertError(45)},  // certificate expired
		&net.OpError{Op: "remote error", Err: tls.AlertError(116)}, // certificate required
		&net.OpError{Op: "read", Err: errors.New("connection reset by peer")},
	} {
		if IsKeyMismatch(err) {
			t.Errorf("IsKeyMismatch(%v) = true", err)
		}
	}
	for _, err := range []error{
		&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}},
		&net.OpError{Op: "remote error", Err: tls.AlertError(42)},
		&net.OpError{Op: "remote error", Err: tls.AlertError(48)},
		fmt.Errorf("dial peer: %w", &net.OpError{Op: "remote error", Err: tls.AlertError(42)}),
	} {
		if !IsKeyMismatch(err) {
			t.Errorf("IsKeyMismatch(%v) = false", err)
		}
	}
}

func TestPeerNodeIDUnverified(t *testing.T) {
	if _, err := PeerNodeID(tls.ConnectionState{}); err == nil {
		t.Error("PeerNodeID accepted an incomplete handshake")
	}
	if _, err := PeerNodeID(tls.ConnectionState{HandshakeComplete: true}); err == nil {
		t.Error("PeerNodeID accepted a state without verified chains")
	}
}

func TestDeriveCADeterministic(t *testing.T) {
	k := seqKey()
	ca1, err := deriveCA(k)
	if err != nil {
		t.Fatal(err)
	}
	ca2, err := deriveCA(k)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ca1.cert.Raw, ca2.cert.Raw) {
		t.Fatal("CA certificate differs between two derivations from the same key")
	}
	if !ca1.key.Equal(ca2.key) {
		t.Fatal("CA key differs between two derivations")
	}
	// Known answer: HKDF-SHA256(key, nil, "orrery/cluster-ca/v1") as the seed.
	pub := hex.EncodeToString(ca1.key.Public().(ed25519.PublicKey))
	if want := "e3d4c14b047c034986c5e12d9dff624a74b78ad5fc92696691475502780cca5e"; pub != want {
		t.Fatalf("CA public key %s, want %s", pub, want)
	}
	c := ca1.cert
	switch {
	case c.SerialNumber.Int64() != 1:
		t.Errorf("serial %v, want 1", c.SerialNumber)
	case c.Subject.CommonName != "Orrery cluster CA 359684bf1f583e2e":
		t.Errorf("subject CN %q", c.Subject.CommonName)
	case !c.NotBefore.Equal(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)) || !c.NotAfter.Equal(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)):
		t.Errorf("validity %v to %v", c.NotBefore, c.NotAfter)
	case !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage != x509.KeyUsageCertSign:
		t.Errorf("IsCA %v, basic constraints %v, key usage %v", c.IsCA, c.BasicConstraintsValid, c.KeyUsage)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}

	other, err := deriveCA(GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	if other.key.Equal(ca1.key) || bytes.Equal(other.cert.Raw, ca1.cert.Raw) {
		t.Fatal("two keys derived the same CA")
	}
}

func TestNewNodeCert(t *testing.T) {
	k := GenerateKey()
	id, err := NewNodeCert(k, "5f0c3a52-7a8e-4c31-9d2b-6b1e2f0a9c44", testNow)
	if err != nil {
		t.Fatal(err)
	}
	if id.NodeID() != "5f0c3a52-7a8e-4c31-9d2b-6b1e2f0a9c44" || id.Fingerprint() != k.Fingerprint() {
		t.Fatalf("NodeID %q, Fingerprint %q", id.NodeID(), id.Fingerprint())
	}
	leaf := id.cert.Leaf
	switch {
	case leaf.Subject.CommonName != id.NodeID():
		t.Errorf("CN %q", leaf.Subject.CommonName)
	case len(leaf.DNSNames) != 1 || leaf.DNSNames[0] != "orrery-peer":
		t.Errorf("DNS names %v", leaf.DNSNames)
	case !leaf.NotBefore.Equal(testNow.Add(-time.Hour)) || !leaf.NotAfter.Equal(testNow.AddDate(1, 0, 0)):
		t.Errorf("validity %v to %v", leaf.NotBefore, leaf.NotAfter)
	case leaf.IsCA:
		t.Error("leaf is a CA")
	case leaf.SerialNumber.Sign() < 0 || leaf.SerialNumber.BitLen() > 128:
		t.Errorf("serial %v: want a non-negative 128-bit number", leaf.SerialNumber)
	}
	ca, err := deriveCA(k)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(leaf.AuthorityKeyId, ca.cert.SubjectKeyId) {
		t.Errorf("leaf authority key id %x, CA subject key id %x", leaf.AuthorityKeyId, ca.cert.SubjectKeyId)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: "orrery-peer", CurrentTime: testNow, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("leaf does not verify for usage %v: %v", usage, err)
		}
	}

	// A fresh key and serial per process, under the same CA.
	id2, err := NewNodeCert(k, id.NodeID(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	if id2.cert.Leaf.SerialNumber.Cmp(leaf.SerialNumber) == 0 || id2.cert.Leaf.PublicKey.(ed25519.PublicKey).Equal(leaf.PublicKey) {
		t.Error("two identities share a serial or a key")
	}

	for _, bad := range []string{"", strings.Repeat("n", 65), "a\nb", "\xff"} {
		if _, err := NewNodeCert(k, bad, testNow); err == nil {
			t.Errorf("NewNodeCert accepted node id %q", bad)
		}
	}
}

func TestConfigs(t *testing.T) {
	id := newIdentity(t, GenerateKey(), "n")
	s, c := id.ServerConfig(), id.ClientConfig()
	if s.MinVersion != tls.VersionTLS13 || c.MinVersion != tls.VersionTLS13 {
		t.Errorf("min versions %#x, %#x", s.MinVersion, c.MinVersion)
	}
	if s.ClientAuth != tls.RequireAndVerifyClientCert || s.ClientCAs == nil {
		t.Errorf("server client auth %v, CAs %v", s.ClientAuth, s.ClientCAs)
	}
	if c.ServerName != "orrery-peer" || c.RootCAs == nil || c.InsecureSkipVerify {
		t.Errorf("client server name %q, roots %v, insecure %v", c.ServerName, c.RootCAs, c.InsecureSkipVerify)
	}
	// Each call returns a new config, so callers may change theirs.
	s.MinVersion = tls.VersionTLS12
	if id.ServerConfig().MinVersion != tls.VersionTLS13 {
		t.Error("ServerConfig returned a shared config")
	}
}
