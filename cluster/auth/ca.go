package auth

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"time"
)

// caInfo is the HKDF info string for the CA seed. Changing it, or anything
// in the CA template below, changes the CA and so the wire protocol.
const caInfo = "orrery/cluster-ca/v1"

// errNoRandom is what noRandom returns: certificate creation must not need
// randomness, or the CA would differ from node to node.
var errNoRandom = errors.New("cluster CA: deterministic signing read randomness")

// noRandom is the io.Reader given to x509.CreateCertificate for the CA.
type noRandom struct{}

func (noRandom) Read([]byte) (int, error) { return 0, errNoRandom }

// clusterCA is the CA derived from a cluster key.
type clusterCA struct {
	cert *x509.Certificate
	key  ed25519.PrivateKey
}

// deriveCA derives the cluster CA from k. Every node with the same key gets
// the same key pair and a byte-identical certificate: the seed comes from
// HKDF, every template field is fixed, and ed25519 signatures are
// deterministic.
func deriveCA(k Key) (*clusterCA, error) {
	seed, err := hkdf.Key(sha256.New, k[:], nil, caInfo, ed25519.SeedSize)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	// Set explicitly: Go derives a missing SubjectKeyId with a hash that has
	// changed between releases, and nodes may be built with different Gos.
	ski := sha256.Sum256(pub)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "Orrery cluster CA " + k.Fingerprint()},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
		SubjectKeyId:          ski[:20],
	}
	der, err := x509.CreateCertificate(noRandom{}, tmpl, tmpl, pub, priv)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: create certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("cluster CA: parse certificate: %w", err)
	}
	return &clusterCA{cert: cert, key: priv}, nil
}
