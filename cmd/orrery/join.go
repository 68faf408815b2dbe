package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/orrery-cluster/orrery/agent/api/client"
	"github.com/orrery-cluster/orrery/cluster"
	"github.com/orrery-cluster/orrery/cluster/auth"
	"github.com/orrery-cluster/orrery/cluster/discovery"
)

const joinUsage = `Usage: orrery join [flags] TOKEN|-

Joins this machine to the cluster of a token that "orrery key invite"
printed on one of its nodes (- reads it from stdin): it checks the token,
stores its cluster key and its addresses as static peers in the data dir
(so that the agent finds the cluster without mDNS), then waits until the
agent here is a member and prints what "orrery doctor" prints. Start the
agent (orrery agent), or restart it if it runs, to take the key. A
malformed or altered token is refused, and nothing is stored.

Flags:
`

// joinPoll is how often join asks the agent whether it is a member.
const joinPoll = 500 * time.Millisecond

func runJoin(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("orrery join", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), joinUsage)
		fs.PrintDefaults()
	}
	dataDir := fs.String("data-dir", "", "agent data directory (default ~/.orrery)")
	apiURL := fs.String("api", client.DefaultBaseURL, "base URL of this machine's agent, to wait for it to join")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the agent to join (0: store and return at once)")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if len(pos) != 1 {
		fmt.Fprintf(stderr, "orrery join: want one argument, the token (or - to read it from stdin); got %d\n", len(pos))
		return 2
	}
	base, err := client.ParseBaseURL(*apiURL)
	if err != nil {
		fmt.Fprintf(stderr, "orrery join: --api %q: %v\n", *apiURL, err)
		return 2
	}
	tok := pos[0]
	if tok == "-" {
		b, err := io.ReadAll(io.LimitReader(stdin, auth.MaxInviteLen+2))
		if err != nil {
			fmt.Fprintf(stderr, "orrery join: read stdin: %v\n", err)
			return 1
		}
		tok = string(b)
	}
	in, err := auth.ParseInvite(tok)
	if err != nil {
		fmt.Fprintf(stderr, "orrery join: %v; nothing stored\n", err)
		return 2
	}
	dir, err := dataDirOr(*dataDir)
	if err != nil {
		fmt.Fprintf(stderr, "orrery join: %v\n", err)
		return 1
	}
	if err := storeInvite(dir, in, stderr); err != nil {
		fmt.Fprintf(stderr, "orrery join: %v\n", err)
		return 1
	}
	if getenv != nil && getenv(auth.EnvKey) != "" {
		fmt.Fprintf(stderr, "note: $%s is set and overrides the stored key\n", auth.EnvKey)
	}
	if *timeout <= 0 {
		return 0
	}
	fmt.Fprintf(stderr, "waiting up to %s for the agent at %s to join (start it, or restart it to take the key: orrery agent --data-dir %s)…\n", *timeout, base, dir)
	if err := waitMember(ctx, base, *timeout); err != nil {
		fmt.Fprintf(stderr, "orrery join: %v\n", err)
		return 1
	}
	return runDoctor([]string{"--api", base}, stdout, stderr)
}

// dataDirOr is dir, or ~/.orrery.
func dataDirOr(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("no home directory (%v); pass --data-dir", err)
	}
	return filepath.Join(home, ".orrery"), nil
}

// storeInvite stores the invite's key and adds its addresses to the
// static peers file, each file replaced atomically.
func storeInvite(dir string, in auth.Invite, stderr io.Writer) error {
	peers, err := discovery.LoadPeers(dir)
	if err != nil {
		return err
	}
	for _, a := range in.Addrs {
		if !slices.Contains(peers, a) {
			peers = append(peers, a)
		}
	}
	prev, had, err := replaceKey(dir, in.Key)
	if err != nil {
		return err
	}
	if err := discovery.SavePeers(dir, peers); err != nil {
		return fmt.Errorf("static peers: %w", err)
	}
	if err := ownLikeDir(dir, auth.KeyFileName, discovery.PeersFile); err != nil {
		return err
	}
	if had && prev != in.Key {
		fmt.Fprintf(stderr, "replaced the cluster key of fingerprint %s ", prev.Fingerprint())
	}
	fmt.Fprintf(stderr, "stored the cluster key (fingerprint %s) and %d static peers (%s) in %s\n",
		in.Key.Fingerprint(), len(peers), strings.Join(in.Addrs, ", "), dir)
	return nil
}

// ownLikeDir gives files in dir the owner of dir when root wrote them:
// "sudo orrery join --data-dir /var/lib/orrery" must leave a key the
// service's own user can read.
func ownLikeDir(dir string, names ...string) error {
	if os.Geteuid() != 0 {
		return nil
	}
	st, err := os.Stat(dir)
	if err != nil {
		return err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok || sys.Uid == 0 {
		return nil
	}
	for _, n := range names {
		if err := os.Chown(filepath.Join(dir, n), int(sys.Uid), int(sys.Gid)); err != nil {
			return fmt.Errorf("give %s to the data dir's owner: %w", n, err)
		}
	}
	return nil
}

// waitMember polls the agent until its cluster has a member besides
// itself and every member follows the same master, at most timeout.
func waitMember(ctx context.Context, base string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := apiClient(base, 2*time.Second)
	t := time.NewTicker(joinPoll)
	defer t.Stop()
	last := "no agent answered"
	for {
		st, err := c.Cluster(ctx)
		switch {
		case err != nil && ctx.Err() != nil: // the wait is over; keep what was last seen
		case err != nil:
			last = fmt.Sprintf("no agent answered at %s (%v)", base, err)
		case len(st.Members) > 1 && allFollow(st.Members, st.MasterID):
			return nil
		case len(st.Members) > 1:
			last = "the members do not yet follow one master"
		default:
			last = fmt.Sprintf("the agent %s answers but has no peer yet", st.NodeID)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not a member of a cluster after %s: %s; is the agent running with the new key (restart it), and do the token's addresses reach the other node? orrery doctor says more", timeout, last)
		case <-t.C:
		}
	}
}

// allFollow reports whether every member follows master: the join is done
// once the election has settled, not at the first heartbeat (when the new
// node may still be a master of one).
func allFollow(members []cluster.Member, master string) bool {
	for _, m := range members {
		// A node's view of itself carries no announcement; its master is
		// the status's.
		if master == "" || !m.Self && m.Follows != master {
			return false
		}
	}
	return true
}

// inviteAddrs are this machine's addresses that other machines may reach,
// with port: every up, non-loopback interface's IPv4 addresses, then its
// global IPv6 ones (link-local ones need a zone and are left out).
func inviteAddrs(port int) ([]string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var v4, v6 []string
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok || ipn.IP.IsLoopback() || ipn.IP.IsLinkLocalUnicast() || !ipn.IP.IsGlobalUnicast() {
				continue
			}
			hp := net.JoinHostPort(ipn.IP.String(), strconv.Itoa(port))
			if ipn.IP.To4() != nil {
				v4 = append(v4, hp)
			} else {
				v6 = append(v6, hp)
			}
		}
	}
	out := append(v4, v6...)
	if len(out) > auth.MaxInviteAddrs {
		out = out[:auth.MaxInviteAddrs]
	}
	if len(out) == 0 {
		return nil, errors.New("this machine has no address other machines could reach (only loopback): pass --addr host:port")
	}
	return out, nil
}
