package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"
)

const (
	doctorDefaultAPI = "http://127.0.0.1:52416"
	// doctorTimeout bounds each request to the agent.
	doctorTimeout = 3 * time.Second
	// apiMaxResponse bounds what is read of one API response.
	apiMaxResponse = 8 << 20
)

const doctorUsage = `Usage: orrery doctor [--api URL]

Asks a running agent how it sees the cluster and why peers may be missing:
this node, the master, each member's round-trip time and clock offset, and
the discovery problems with what to do about them. Exits 0 when discovery
reports no problem, 1 when it reports one or the agent does not answer.

Flags:
`

// doctorHealth is GET /healthz.
type doctorHealth struct {
	Status              string `json:"status"`
	NodeID              string `json:"nodeId"`
	Version             string `json:"version"`
	LastEventAppliedIdx int64  `json:"lastEventAppliedIdx"`
}

// doctorCluster is the part of GET /cluster the doctor and the demo read.
// It is declared here rather than taken from the cluster package so that
// the CLI reads the API's JSON as any client does.
type doctorCluster struct {
	NodeID   string         `json:"nodeId"`
	MasterID string         `json:"masterId"`
	IsMaster bool           `json:"isMaster"`
	Members  []doctorMember `json:"members"`
	Links    []doctorLink   `json:"links"`
}

type doctorMember struct {
	NodeID    string    `json:"nodeId"`
	StartedAt time.Time `json:"startedAt"`
	LastHeard time.Time `json:"lastHeard"`
	Self      bool      `json:"self"`
}

// doctorLink is one entry of /cluster's "links".
type doctorLink struct {
	PeerID                 string        `json:"peerId"`
	RTTEWMA                time.Duration `json:"rttEwmaNs"`
	ClockOffset            time.Duration `json:"clockOffsetNs"` // peer clock − ours
	ClockOffsetUncertainty time.Duration `json:"clockOffsetUncertaintyNs"`
	LossPct                float64       `json:"lossPct"`
}

// doctorDiscovery is GET /state/discovery.
type doctorDiscovery struct {
	Mode                doctorSources   `json:"mode"`
	PeersFound          int             `json:"peersFound"`
	MulticastInterfaces []string        `json:"multicastInterfaces"`
	Problems            []doctorProblem `json:"problems"`
}

// doctorSources says which discovery sources are enabled.
type doctorSources struct {
	MDNS     bool `json:"mdns"`
	Loopback bool `json:"loopback"`
	Static   bool `json:"static"`
}

type doctorProblem struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Hint    string `json:"hint"`
}

// doctorReport is everything the doctor shows, as the agent answered it.
type doctorReport struct {
	API       string // the agent's base URL
	Health    doctorHealth
	Cluster   doctorCluster
	Discovery doctorDiscovery
}

// runDoctor runs "orrery doctor": 0 when the agent reports no discovery
// problem, 1 when it does or does not answer, 2 on usage errors.
func runDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("orrery doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), doctorUsage)
		fs.PrintDefaults()
	}
	api := fs.String("api", doctorDefaultAPI, "base URL of the agent's local API")
	if code, ok := parseFlags(fs, args, stderr); !ok {
		return code
	}
	base, err := doctorBaseURL(*api)
	if err != nil {
		fmt.Fprintf(stderr, "orrery doctor: --api %q: %v\n", *api, err)
		return 2
	}

	ctx := context.Background()
	client := &http.Client{Timeout: doctorTimeout}
	r := doctorReport{API: base}
	if err := apiGet(ctx, client, base, "/healthz", &r.Health); err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
		} else {
			fmt.Fprintf(stderr, "orrery doctor: no agent answers at %s: %v — start one with `orrery agent`\n", base, err)
		}
		return 1
	}
	for _, q := range []struct {
		path string
		v    any
	}{{"/cluster", &r.Cluster}, {"/state/discovery", &r.Discovery}} {
		if err := apiGet(ctx, client, base, q.path, q.v); err != nil {
			fmt.Fprintf(stderr, "orrery doctor: %v\n", err)
			return 1
		}
	}
	renderDoctor(stdout, r)
	if len(r.Discovery.Problems) > 0 {
		return 1
	}
	return 0
}

// doctorBaseURL accepts "http://host:port", "host:port" and a trailing
// slash, and returns "scheme://host:port".
func doctorBaseURL(s string) (string, error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("want an http:// URL, got scheme %q", u.Scheme)
	}
	if u.Host == "" {
		return "", errors.New("no host")
	}
	if p := strings.TrimRight(u.Path, "/"); p != "" || u.RawQuery != "" || u.Fragment != "" {
		return "", errors.New("want only scheme, host and port, e.g. http://127.0.0.1:52416")
	}
	return u.Scheme + "://" + u.Host, nil
}

// apiError is an answer from the agent other than 200.
type apiError struct {
	Method string
	URL    string
	Status int
	Msg    string // the API's error message, else the body
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s %s: %d %s: %s", e.Method, e.URL, e.Status, http.StatusText(e.Status), e.Msg)
}

// apiErrorOf is the *apiError for a non-200 answer: its message is the
// API's {"error": "…"} or OpenAI's {"error": {"message": "…"}}, else the
// body.
func apiErrorOf(method, url string, status int, body []byte) *apiError {
	msg := strings.TrimSpace(string(body))
	var plain struct {
		Error string `json:"error"`
	}
	var oai struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &plain) == nil && plain.Error != "" {
		msg = plain.Error
	} else if json.Unmarshal(body, &oai) == nil && oai.Error.Message != "" {
		msg = oai.Error.Message
	}
	return &apiError{Method: method, URL: url, Status: status, Msg: msg}
}

// apiGet GETs base+path from an agent's API and decodes the JSON answer
// into v. A non-200 answer is an *apiError.
func apiGet(ctx context.Context, client *http.Client, base, path string, v any) error {
	return apiDo(ctx, client, http.MethodGet, base, path, nil, v)
}

// apiPost POSTs in as JSON to base+path and decodes the JSON answer into
// out. A non-200 answer is an *apiError.
func apiPost(ctx context.Context, client *http.Client, base, path string, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return apiDo(ctx, client, http.MethodPost, base, path, b, out)
}

// apiDo sends one request (a JSON body when body is not nil) and decodes
// the JSON answer into out. A non-200 answer is an *apiError.
func apiDo(ctx context.Context, client *http.Client, method, base, path string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, apiMaxResponse))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, base+path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return apiErrorOf(method, base+path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%s %s: decode: %w", method, base+path, err)
	}
	return nil
}

// renderDoctor writes the human-readable report. It is pure: everything it
// shows is in r.
func renderDoctor(w io.Writer, r doctorReport) {
	version := r.Health.Version
	if version == "" {
		version = "unknown version"
	}
	fmt.Fprintf(w, "Agent      %s (orrery %s, status %s)\n", r.API, version, r.Health.Status)
	id := r.Cluster.NodeID
	if id == "" {
		id = r.Health.NodeID
	}
	fmt.Fprintf(w, "Node       %s\n", id)
	switch {
	case r.Cluster.MasterID == "":
		fmt.Fprintln(w, "Master     none elected yet")
	case r.Cluster.MasterID == id:
		fmt.Fprintf(w, "Master     %s (this node)\n", r.Cluster.MasterID)
	default:
		fmt.Fprintf(w, "Master     %s\n", r.Cluster.MasterID)
	}

	fmt.Fprintf(w, "Members    %d (rtt and clock offset measured from this node; offset = member's clock − ours)\n", len(r.Cluster.Members))
	links := map[string]doctorLink{}
	for _, l := range r.Cluster.Links { // the agent lists measured links only
		links[l.PeerID] = l
	}
	var table strings.Builder // padded by tabwriter, then trailing spaces cut
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', 0)
	for _, m := range r.Cluster.Members {
		role := "worker"
		if m.NodeID == r.Cluster.MasterID {
			role = "master"
		}
		meas := "no probe yet"
		if m.Self || m.NodeID == id {
			role, meas = role+", this node", ""
		} else if l, ok := links[m.NodeID]; ok {
			meas = fmt.Sprintf("rtt %s\toffset %s", doctorMs(l.RTTEWMA, false), doctorMs(l.ClockOffset, true))
			if l.ClockOffsetUncertainty > 0 {
				meas += " ± " + doctorMs(l.ClockOffsetUncertainty, false)
			}
			if l.LossPct > 0 {
				meas += fmt.Sprintf("\tloss %.0f%%", l.LossPct)
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", m.NodeID, role, meas)
	}
	tw.Flush()
	for line := range strings.Lines(table.String()) {
		fmt.Fprintln(w, strings.TrimRight(line, " \n"))
	}

	fmt.Fprintf(w, "Discovery  %s\n", doctorMode(r.Discovery.Mode))
	if r.Discovery.Mode.MDNS {
		ifs := "none"
		if len(r.Discovery.MulticastInterfaces) > 0 {
			ifs = strings.Join(r.Discovery.MulticastInterfaces, ", ")
		}
		fmt.Fprintf(w, "           multicast interfaces: %s\n", ifs)
	}
	fmt.Fprintln(w)
	if len(r.Discovery.Problems) == 0 {
		fmt.Fprintf(w, "✓ found %d %s\n", r.Discovery.PeersFound, doctorPlural(r.Discovery.PeersFound, "peer", "peers"))
		return
	}
	for _, p := range r.Discovery.Problems {
		fmt.Fprintf(w, "✗ %s\n    → %s\n", p.Message, p.Hint)
	}
}

// doctorMs formats a duration in milliseconds with 2 decimals, signed when
// asked.
func doctorMs(d time.Duration, signed bool) string {
	ms := float64(d) / float64(time.Millisecond)
	if signed {
		return fmt.Sprintf("%+.2f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", ms)
}

func doctorMode(m doctorSources) string {
	var on []string
	if m.MDNS {
		on = append(on, "mDNS")
	}
	if m.Loopback {
		on = append(on, "loopback (agents on this machine)")
	}
	if m.Static {
		on = append(on, "static peers")
	}
	if len(on) == 0 {
		return "no source enabled"
	}
	return strings.Join(on, ", ")
}

func doctorPlural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
