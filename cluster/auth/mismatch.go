package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
)

// IsKeyMismatch reports whether err, from a TLS handshake or the first
// read or write after it, says that the peer's certificate comes from
// another cluster CA, that is, the peer uses another cluster key.
//
// The side that verifies fails with x509.UnknownAuthorityError. The other
// side only receives an alert: "unknown certificate authority" from a Go
// server, "bad certificate" from a Go client. The latter is also what a
// client sends for other verification failures, so on a server this is a
// strong hint rather than proof.
func IsKeyMismatch(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	// A received alert is a *net.OpError with Op "remote error" around an
	// unexported type; its text matches the exported tls.AlertError's.
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "remote error" && op.Err != nil {
		switch op.Err.Error() {
		case alertBadCertificate.Error(), alertUnknownCA.Error():
			return true
		}
	}
	return false
}

// TLS alert codes (RFC 8446, section 6).
const (
	alertBadCertificate tls.AlertError = 42
	alertUnknownCA      tls.AlertError = 48
)
