package collective

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// A group's direct links (rank to rank across machines, not through the
// agents) run TLS 1.3 under a secret every rank of the group holds (the
// agents derive it from the cluster key for each instance). Every rank
// presents the same certificate, of an ed25519 key derived from the
// secret, and accepts only a peer that proves it holds that key: no CA,
// no names, nothing to issue.

// LinkTLS returns the server and client configs of links secured by
// secret (at least 16 bytes).
func LinkTLS(secret []byte) (server, client *tls.Config, err error) {
	if len(secret) < 16 {
		return nil, nil, fmt.Errorf("link secret of %d bytes, want 16 or more", len(secret))
	}
	seed := sha256.Sum256(append([]byte("orrery/link-key/v1\x00"), secret...))
	priv := ed25519.NewKeyFromSeed(seed[:])
	pub := priv.Public().(ed25519.PublicKey)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "orrery rank link"},
		NotBefore:    time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:     time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(nil, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, nil, fmt.Errorf("link certificate: %w", err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
	// The handshake's CertificateVerify proves the peer holds the key of
	// the certificate it sent; this checks that key is the group's.
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) != 1 {
			return fmt.Errorf("rank link: the peer sent %d certificates, want 1", len(raw))
		}
		c, err := x509.ParseCertificate(raw[0])
		if err != nil {
			return fmt.Errorf("rank link: the peer's certificate: %w", err)
		}
		k, ok := c.PublicKey.(ed25519.PublicKey)
		if !ok || !bytes.Equal(k, pub) {
			return errors.New("rank link: the peer's key is not the group's")
		}
		return nil
	}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		ClientAuth: tls.RequireAnyClientCert, VerifyPeerCertificate: verify}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert},
		InsecureSkipVerify: true, VerifyPeerCertificate: verify} // verify checks the key instead of a chain
	return server, client, nil
}
