package clustertest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"sync/atomic"
	"testing"
	"time"
)

// CA issues node certificates for the nodes' mutual TLS, the way
// cluster/auth does from the cluster key (which has its own tests).
type CA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
	pool *x509.CertPool
}

var serial atomic.Int64

// NewCA makes a CA; nodes with certificates of different CAs refuse each
// other.
func NewCA(tb testing.TB) *CA {
	tb.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &CA{cert, priv, pool}
}

// TLS returns the server and client configs of node id.
func (ca *CA) TLS(tb testing.TB, id string) (server, client *tls.Config) {
	tb.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: id},
		DNSNames: []string{"orrery-peer"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, pub, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	leaf := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}
	server = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool}
	client = &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{leaf},
		RootCAs: ca.pool, ServerName: "orrery-peer"}
	return server, client
}

// PeerID is cluster.Config.PeerID for certificates of a CA: the node id
// is the verified certificate's common name.
func PeerID(cs tls.ConnectionState) (string, error) {
	if len(cs.VerifiedChains) == 0 {
		return "", errors.New("no verified chain")
	}
	return cs.VerifiedChains[0][0].Subject.CommonName, nil
}
