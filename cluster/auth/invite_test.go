package auth

import (
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestInviteRoundTrip(t *testing.T) {
	in := Invite{Key: GenerateKey(), Addrs: []string{"10.0.0.2:52400", "[fd00::2]:52400", "mac.local:52400"}}
	tok, err := in.Token()
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsAny(tok, "+/=") {
		t.Errorf("token %q is not base64url without padding", tok)
	}
	got, err := ParseInvite("  " + tok + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if got.Key != in.Key || !slices.Equal(got.Addrs, in.Addrs) {
		t.Errorf("parsed %v, want %v", got, in)
	}
	// Printing an invite shows the fingerprint, never the key.
	if s := in.String(); strings.Contains(s, in.Key.String()) || !strings.Contains(s, in.Key.Fingerprint()) {
		t.Errorf("String() = %q", s)
	}
}

func TestInviteRefusals(t *testing.T) {
	k := GenerateKey()
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	good := `"key":"` + k.String() + `","fp":"` + k.Fingerprint() + `"`
	for _, c := range []struct{ token, want string }{
		{"", "empty"},
		{"not*base64", "not base64url"},
		{enc(`[1,2]`), "not an Orrery invite"},
		{enc(`{"v":1,` + good + `,"addrs":["a:1"],"extra":1}`), "not an Orrery invite"},
		{enc(`{"v":2,` + good + `,"addrs":["a:1"]}`), "version 2"},
		{enc(`{"v":1,"key":"abc","fp":"x","addrs":["a:1"]}`), "want 64 hex characters"},
		{enc(`{"v":1,"key":"` + k.String() + `","fp":"0000000000000000","addrs":["a:1"]}`), "changed or copied wrong"},
		{enc(`{"v":1,` + good + `,"addrs":[]}`), "no addresses"},
		{enc(`{"v":1,` + good + `,"addrs":["nohost"]}`), `address "nohost"`},
		{enc(`{"v":1,` + good + `,"addrs":["h:0"]}`), "not 1..65535"},
		{enc(`{"v":1,` + good + `,"addrs":[":52400"]}`), "bad host"},
		{strings.Repeat("A", MaxInviteLen+1), "at most 4096"},
		{enc(`{"v":1,` + good + `,"addrs":["a:1"]}x`), "bytes after the invite"},
	} {
		_, err := ParseInvite(c.token)
		if !errors.Is(err, ErrInvalidInvite) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseInvite(%.40q) = %v, want an invalid-invite error with %q", c.token, err, c.want)
		}
	}
}

func FuzzParseInvite(f *testing.F) {
	k := GenerateKey()
	tok, _ := Invite{Key: k, Addrs: []string{"10.0.0.2:52400"}}.Token()
	f.Add(tok)
	f.Add("")
	f.Add(base64.RawURLEncoding.EncodeToString([]byte(`{"v":1}`)))
	f.Fuzz(func(t *testing.T, s string) {
		in, err := ParseInvite(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidInvite) {
				t.Fatalf("error %v does not match ErrInvalidInvite", err)
			}
			return
		}
		// What parses encodes back to a token that parses the same.
		again, err := in.Token()
		if err != nil {
			t.Fatalf("a parsed invite does not encode: %v", err)
		}
		back, err := ParseInvite(again)
		if err != nil || back.Key != in.Key || !slices.Equal(back.Addrs, in.Addrs) {
			t.Fatalf("round trip: %v %v", back, err)
		}
	})
}
