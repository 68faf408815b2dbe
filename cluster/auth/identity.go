package auth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
	"unicode"
	"unicode/utf8"
)

// PeerServerName is the DNS name in every node certificate and the name a
// client checks: peers are found by address, so the node id (the CN) is
// checked by the caller through PeerNodeID instead.
const PeerServerName = "orrery-peer"

// maxNodeIDLen is the X.509 upper bound for a common name.
const maxNodeIDLen = 64

// Identity is this process's TLS identity in the cluster: a leaf
// certificate for the node id, signed by the cluster CA. It is immutable
// and safe for concurrent use.
type Identity struct {
	nodeID      string
	fingerprint string
	cert        tls.Certificate
	roots       *x509.CertPool // holds only the cluster CA
}

// NewNodeCert derives the cluster CA from k and issues a certificate for
// nodeID with a fresh ed25519 key, valid from now-1h (tolerating clock
// skew between nodes) to now+1 year.
func NewNodeCert(k Key, nodeID string, now time.Time) (*Identity, error) {
	if err := checkNodeID(nodeID); err != nil {
		return nil, err
	}
	ca, err := deriveCA(k)
	if err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("node certificate: serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: nodeID},
		DNSNames:              []string{PeerServerName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		return nil, fmt.Errorf("node certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("node certificate: parse: %w", err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	return &Identity{
		nodeID:      nodeID,
		fingerprint: k.Fingerprint(),
		cert:        tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf},
		roots:       roots,
	}, nil
}

func checkNodeID(id string) error {
	switch {
	case id == "":
		return errors.New("node certificate: node id is empty")
	case len(id) > maxNodeIDLen:
		return fmt.Errorf("node certificate: node id is %d bytes, want at most %d", len(id), maxNodeIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("node certificate: node id %q is not valid UTF-8", id)
	}
	for _, r := range id {
		if unicode.IsControl(r) {
			return fmt.Errorf("node certificate: node id %q has a control character", id)
		}
	}
	return nil
}

// NodeID returns the node id the certificate was issued for.
func (id *Identity) NodeID() string { return id.nodeID }

// Fingerprint returns the cluster key's fingerprint (Key.Fingerprint).
func (id *Identity) Fingerprint() string { return id.fingerprint }

// ServerConfig returns a new TLS 1.3 server config that requires a client
// certificate from the same cluster CA. Callers may modify it.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    id.roots,
	}
}

// ClientConfig returns a new TLS 1.3 client config that presents this
// node's certificate and accepts only servers from the same cluster CA.
// Callers may modify it.
func (id *Identity) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{id.cert},
		RootCAs:      id.roots,
		ServerName:   PeerServerName,
	}
}

// PeerNodeID returns the node id of the verified peer of a completed
// handshake made with ServerConfig or ClientConfig.
func PeerNodeID(cs tls.ConnectionState) (string, error) {
	if !cs.HandshakeComplete {
		return "", errors.New("peer node id: handshake not complete")
	}
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", errors.New("peer node id: peer certificate not verified")
	}
	cn := cs.VerifiedChains[0][0].Subject.CommonName
	if cn == "" {
		return "", errors.New("peer node id: peer certificate has no common name")
	}
	return cn, nil
}
