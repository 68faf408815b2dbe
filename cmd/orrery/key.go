package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/cluster/auth"
)

const keyUsage = `Usage:
  orrery key show [--data-dir DIR]         print the cluster key (creating one if there is none)
  orrery key set [--data-dir DIR] HEX|-    store the cluster key (- reads it from stdin)
  orrery key fingerprint [--data-dir DIR]  print the key's fingerprint, safe to share
  orrery key invite [--data-dir DIR] [--addr HOST:PORT]... [--peer-port N]
                                           print a token that joins another machine
                                           (orrery join TOKEN there): the key and
                                           this machine's addresses, secret as the key

Every node of a cluster needs the same key: run "orrery key show" on one node
and "orrery key set" with its output on the others. $` + auth.EnvKey + `, when
set, overrides the key file <data-dir>/` + auth.KeyFileName + `.
`

// maxKeyInput bounds what "orrery key set -" reads from stdin.
const maxKeyInput = 4096

// runKey runs "orrery key …": 0 on success, 2 for usage errors (including
// a malformed key), 1 for runtime errors.
func runKey(args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, keyUsage)
		return 2
	}
	sub, args := args[0], args[1:]
	switch sub {
	case "help", "-h", "--help":
		fmt.Fprint(stdout, keyUsage)
		return 0
	case "invite":
		return runKeyInvite(args, stdout, stderr, getenv)
	case "show", "fingerprint", "set":
	default:
		fmt.Fprintf(stderr, "orrery key: unknown subcommand %q\n\n%s", sub, keyUsage)
		return 2
	}

	fs := flag.NewFlagSet("orrery key "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), keyUsage) }
	dataDir := fs.String("data-dir", "", "agent data directory (default ~/.orrery)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	want := 0
	if sub == "set" {
		want = 1
	}
	if len(pos) != want {
		if want == 0 {
			fmt.Fprintf(stderr, "orrery key %s: unexpected argument %q\n", sub, pos[0])
		} else {
			fmt.Fprintf(stderr, "orrery key set: want one argument, the key (64 hex characters) or - to read it from stdin; got %d\n", len(pos))
		}
		return 2
	}
	dir, err := dataDirOr(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key %s: %v\n", sub, err)
		return 1
	}

	if sub == "set" {
		return keySet(dir, pos[0], stdin, stderr, getenv)
	}
	k, src, err := auth.LoadOrCreateKey(dir, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key %s: %v\n", sub, err)
		return 1
	}
	path := filepath.Join(dir, auth.KeyFileName)
	switch src {
	case auth.SourceEnv:
		fmt.Fprintf(stderr, "cluster key from $%s, fingerprint %s\n", auth.EnvKey, k.Fingerprint())
	case auth.SourceFile:
		fmt.Fprintf(stderr, "cluster key from %s, fingerprint %s\n", path, k.Fingerprint())
	case auth.SourceGenerated:
		fmt.Fprintf(stderr, "no cluster key yet: generated a new one in %s, fingerprint %s\n"+
			"(a cluster's nodes need the same key: use \"orrery key set\" on the others)\n", path, k.Fingerprint())
	}
	if sub == "show" {
		fmt.Fprintln(stdout, k.String())
	} else {
		fmt.Fprintln(stdout, k.Fingerprint())
	}
	return 0
}

// keySet implements "orrery key set": arg is the key or "-" for stdin.
func keySet(dir, arg string, stdin io.Reader, stderr io.Writer, getenv func(string) string) int {
	in, from := arg, "argument"
	if arg == "-" {
		if stdin == nil {
			stdin = os.Stdin
		}
		b, err := io.ReadAll(io.LimitReader(stdin, maxKeyInput))
		if err != nil {
			fmt.Fprintf(stderr, "orrery key set: read stdin: %v\n", err)
			return 1
		}
		in, from = string(b), "stdin"
	}
	k, err := auth.ParseKey(in)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key set: %s: %v; nothing changed\n", from, err)
		return 2
	}
	path := filepath.Join(dir, auth.KeyFileName)
	prev, had, err := replaceKey(dir, k)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key set: %v\n", err)
		return 1
	}
	if had && prev == k {
		fmt.Fprintf(stderr, "%s already held this key, fingerprint %s\n", path, k.Fingerprint())
	} else {
		fmt.Fprintf(stderr, "stored cluster key in %s, fingerprint %s; restart the agent to use it\n", path, k.Fingerprint())
	}
	if getenv != nil && getenv(auth.EnvKey) != "" {
		fmt.Fprintf(stderr, "note: $%s is set and overrides this file\n", auth.EnvKey)
	}
	return 0
}

// replaceKey stores k in dir and returns the key the file held before, if
// it held a valid one: read only to tell the user what changed (a
// malformed or missing file is what storing a key is there to fix).
func replaceKey(dir string, k auth.Key) (prev auth.Key, had bool, err error) {
	old, oldErr := os.ReadFile(filepath.Join(dir, auth.KeyFileName))
	if err := auth.SaveKey(dir, k); err != nil {
		return auth.Key{}, false, err
	}
	prev, perr := auth.ParseKey(string(old))
	return prev, oldErr == nil && perr == nil, nil
}

// parseInterspersed parses flags that may come before or after positional
// arguments ("set HEX --data-dir D" as well as "set --data-dir D HEX"),
// which flag.Parse alone does not allow.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		used := len(args) - fs.NArg()
		if used > 0 && args[used-1] == "--" {
			return append(pos, fs.Args()...), nil // all that follows "--" is positional
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// runKeyInvite implements "orrery key invite".
func runKeyInvite(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("orrery key invite", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(fs.Output(), keyUsage) }
	dataDir := fs.String("data-dir", "", "agent data directory (default ~/.orrery)")
	var addrs []string
	fs.Func("addr", "an address (host:port of this agent's peer links) the other machine reaches this one at (repeatable; default: every address of this machine's interfaces, at --peer-port)", func(v string) error {
		addrs = append(addrs, v)
		return nil
	})
	port := fs.Int("peer-port", 52400, "the port of this agent's peer links (its --peer-addr's), for the default addresses")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) != 0 {
		fmt.Fprintf(stderr, "orrery key invite: unexpected argument %q\n", pos[0])
		return 2
	}
	if *port < 1 || *port > 65535 {
		fmt.Fprintf(stderr, "orrery key invite: --peer-port %d is not 1..65535\n", *port)
		return 2
	}
	dir, err := dataDirOr(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key invite: %v\n", err)
		return 1
	}
	if len(addrs) == 0 {
		if addrs, err = inviteAddrs(*port); err != nil {
			fmt.Fprintf(stderr, "orrery key invite: %v\n", err)
			return 1
		}
	}
	k, _, err := auth.LoadOrCreateKey(dir, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "orrery key invite: %v\n", err)
		return 1
	}
	tok, err := auth.Invite{Key: k, Addrs: addrs}.Token()
	if err != nil {
		fmt.Fprintf(stderr, "orrery key invite: %v\n", err)
		return 2
	}
	fmt.Fprintf(stderr, "an invite to the cluster of key fingerprint %s, reached at %s.\n"+
		"It holds the key: share it as a secret. On the other machine: orrery join <token>\n", k.Fingerprint(), strings.Join(addrs, ", "))
	fmt.Fprintln(stdout, tok)
	return 0
}
