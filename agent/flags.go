package agent

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// RegisterFlags adds the flags every program that runs an agent shares
// (orrery agent, the desktop app) to fs, bound to c. Call the returned
// function after fs.Parse: it applies --loopback's default directory.
func (c *Config) RegisterFlags(fs *flag.FlagSet) (finish func()) {
	fs.StringVar(&c.APIAddr, "api-addr", c.APIAddr, "listen address of the HTTP API; beyond loopback, requests from other machines need the API token")
	fs.StringVar(&c.APIToken, "api-token", "", "token requests from other machines must send (Authorization: Bearer); unset, $ORRERY_API_TOKEN, else one made at first start in <data-dir>/api-token once --api-addr is not loopback")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory for the node id, models and traces")
	fs.StringVar(&c.PeerAddr, "peer-addr", c.PeerAddr, "listen address for peer links (TLS 1.3, authenticated by the cluster key); port 0 picks one")
	fs.Func("peer", "a static peer's host:port, for VPNs and VLANs mDNS does not reach (repeatable)", func(v string) error {
		c.Peers = append(c.Peers, v)
		return nil
	})
	fs.Var(&c.KeepAlive, "keep-alive", "how long a model loaded on demand stays loaded after its last request (5m, 1h, seconds; 0 unloads at once, -1 never); a request's keep_alive wins")
	fs.BoolVar(&c.MDNS, "mdns", c.MDNS, "advertise and browse _orrery._tcp with mDNS")
	fs.StringVar(&c.Registry, "registry", "", "the registry that pulls of name:tag models come from (default https://registry.ollama.ai); hf.co/ pulls use HF_ENDPOINT")
	loopback := fs.Bool("loopback", false, "find other agents on this machine without multicast (records in the loopback dir)")
	fs.StringVar(&c.LoopbackDir, "loopback-dir", "", "directory for loopback discovery records (implies --loopback; default $TMPDIR/orrery-loopback-$UID)")
	return func() {
		if *loopback && c.LoopbackDir == "" {
			c.LoopbackDir = filepath.Join(os.TempDir(), fmt.Sprintf("orrery-loopback-%d", os.Getuid()))
		}
	}
}
