package supervisor

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Direct rank links. A tensor-parallel group sums twice per block, and
// through the agents each sum crosses two relays (runner → agent → peer
// agent → runner). So the agent grants each tensor-parallel runner a
// listener on its peer address, which the runner inherits (runners never
// listen beyond loopback themselves), and the instance's link secret,
// derived from the cluster key: the group's higher ranks then dial it
// directly over TLS under that secret (collective.LinkTLS), and fall back
// to the relay when they cannot.

// directGrant is a listener made for a runner: its port, and the agent's
// copies to close once the runner has started.
type directGrant struct {
	port int
	ln   net.Listener
	f    *os.File
}

func (g *directGrant) close() {
	g.f.Close()
	g.ln.Close()
}

// grantDirect adds a direct-link listener and the link secret to cmd for
// a rank of a tensor-parallel instance; nil when direct links are off.
func (p *proc) grantDirect(cmd *exec.Cmd) (*directGrant, error) {
	cfg := p.s.cfg
	if !p.inst.Shape().TensorParallel() || cfg.DirectHost == "" || cfg.LinkSecret == nil {
		return nil, nil
	}
	ln, err := listenIn(cfg.DirectHost, cfg.DirectPorts)
	if err != nil {
		return nil, err
	}
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("direct rank link listener: %w", err)
	}
	// ExtraFiles[i] is the child's descriptor 3+i.
	cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	cmd.Env = append(cmd.Env, runnerapi.DirectFDEnv+"="+strconv.Itoa(2+len(cmd.ExtraFiles)),
		runnerapi.LinkSecretEnv+"="+hex.EncodeToString(cfg.LinkSecret(p.inst.InstanceID)))
	return &directGrant{port: ln.Addr().(*net.TCPAddr).Port, ln: ln, f: f}, nil
}

// listenIn listens on host at the first free port of ports ({0, 0}: any).
func listenIn(host string, ports [2]int) (net.Listener, error) {
	if ports == [2]int{} {
		ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return nil, fmt.Errorf("direct rank link listener on %s: %w", host, err)
		}
		return ln, nil
	}
	var err error
	for p := ports[0]; p <= ports[1]; p++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p))); err == nil {
			return ln, nil
		}
	}
	return nil, fmt.Errorf("direct rank link listener on %s: no free port in %d-%d (agent --direct-ports; the last: %w)", host, ports[0], ports[1], err)
}
