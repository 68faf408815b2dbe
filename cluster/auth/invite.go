package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
)

// An Invite is what `orrery key invite` prints and `orrery join` reads:
// the cluster key and the addresses (host:port) at which the inviting
// node's peer links answer, as one token to copy. The token also carries
// the key's fingerprint, so that a token changed or cut short in the
// copying is refused rather than stored. It holds the key itself: treat
// it as the secret it is (never logged; shown only where asked for).
type Invite struct {
	Key   Key
	Addrs []string
}

// String shows the invite without its key (its fingerprint instead), so
// that printing one by mistake does not leak the key; Token is the secret.
func (in Invite) String() string {
	return fmt.Sprintf("invite(key fingerprint %s, addresses %s)", in.Key.Fingerprint(), strings.Join(in.Addrs, ", "))
}

// LogValue is String's, for slog.
func (in Invite) LogValue() slog.Value { return slog.StringValue(in.String()) }

// Limits on what ParseInvite reads.
const (
	MaxInviteLen   = 4096
	MaxInviteAddrs = 16
	inviteVersion  = 1
)

// ErrInvalidInvite is matched (errors.Is) by every error ParseInvite
// returns.
var ErrInvalidInvite = errors.New("invalid invite token")

type inviteError struct{ msg string }

func (e *inviteError) Error() string        { return "invite token: " + e.msg }
func (e *inviteError) Is(target error) bool { return target == ErrInvalidInvite }

func inviteErrf(format string, args ...any) error {
	return &inviteError{fmt.Sprintf(format, args...)}
}

type inviteJSON struct {
	V     int      `json:"v"`
	Key   string   `json:"key"`
	FP    string   `json:"fp"`
	Addrs []string `json:"addrs"`
}

// Token encodes the invite: base64url, without padding, of a small JSON
// object (version, key, fingerprint, addresses).
func (in Invite) Token() (string, error) {
	if err := checkAddrs(in.Addrs); err != nil {
		return "", err
	}
	b, err := json.Marshal(inviteJSON{V: inviteVersion, Key: in.Key.String(), FP: in.Key.Fingerprint(), Addrs: in.Addrs})
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// ParseInvite reads a token, surrounding whitespace ignored. Every check
// fails with a message that says what is wrong: not base64url, not an
// invite, another version, a bad key, a fingerprint that does not match
// the key, no or bad addresses.
func ParseInvite(token string) (Invite, error) {
	token = strings.TrimSpace(token)
	if token == "" {
		return Invite{}, inviteErrf("empty")
	}
	if len(token) > MaxInviteLen {
		return Invite{}, inviteErrf("%d characters, at most %d", len(token), MaxInviteLen)
	}
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Invite{}, inviteErrf("not base64url (%v): copy all of what orrery key invite printed", err)
	}
	var j inviteJSON
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return Invite{}, inviteErrf("not an Orrery invite (%v)", err)
	}
	if dec.More() || dec.InputOffset() != int64(len(b)) {
		return Invite{}, inviteErrf("bytes after the invite: copy exactly what orrery key invite printed")
	}
	if j.V != inviteVersion {
		return Invite{}, inviteErrf("version %d; this orrery reads version %d", j.V, inviteVersion)
	}
	k, err := ParseKey(j.Key)
	if err != nil {
		return Invite{}, inviteErrf("%v", err)
	}
	if fp := k.Fingerprint(); j.FP != fp {
		return Invite{}, inviteErrf("its key's fingerprint is %s but it says %q: it was changed or copied wrong", fp, j.FP)
	}
	if err := checkAddrs(j.Addrs); err != nil {
		return Invite{}, err
	}
	return Invite{Key: k, Addrs: j.Addrs}, nil
}

// checkAddrs wants 1..MaxInviteAddrs addresses, each host:port with a
// port of 1..65535 and a host without spaces.
func checkAddrs(addrs []string) error {
	if len(addrs) == 0 {
		return inviteErrf("no addresses to reach the cluster at")
	}
	if len(addrs) > MaxInviteAddrs {
		return inviteErrf("%d addresses, at most %d", len(addrs), MaxInviteAddrs)
	}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return inviteErrf("address %q: %v", a, err)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return inviteErrf("address %q: port %q is not 1..65535", a, port)
		}
		if host == "" || strings.ContainsAny(host, " \t\r\n/") {
			return inviteErrf("address %q: bad host", a)
		}
	}
	return nil
}
