package app

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/orrery-cluster/orrery/agent/state"
	"github.com/orrery-cluster/orrery/agent/tracestore"
)

// NumLines is the number of status lines at the top of the menu.
const NumLines = 4

// Snapshot is what one refresh read from the agent.
type Snapshot struct {
	// Err is set when /state could not be read; the rest is then empty.
	Err   error
	State state.State
	// Traces is /v1/traces; TracesErr is set when it could not be read.
	Traces    []tracestore.Meta
	TracesErr error
	// TokPerS is the decode speed of the latest chat trace, when known.
	TokPerS    float64
	HasTokPerS bool
}

// Status is the cluster's health at a glance, as the menu shows it.
type Status struct {
	Online bool
	Nodes  int
	// MemUsed and MemTotal are summed over the nodes that reported both
	// (MemNodes of them).
	MemUsed, MemTotal uint64
	MemNodes          int
	// Runners counts runners by status ("Ready": 3).
	Runners map[string]int
	// Latest is the newest trace, when HasTrace. TracesUnknown is set
	// when the list could not be read.
	Latest        tracestore.Meta
	HasTrace      bool
	TracesUnknown bool
	TokPerS       float64
	HasTok        bool
	// Now is when the status was made (for the trace's age).
	Now time.Time
}

// Summarize turns a snapshot into a status.
func Summarize(s Snapshot, now time.Time) Status {
	st := Status{Now: now, Runners: map[string]int{}}
	if s.Err != nil {
		return st
	}
	st.Online = true
	st.Nodes = len(s.State.NodeIdentities)
	if st.Nodes == 0 {
		st.Nodes = len(s.State.NodeMemory) // identities not yet replicated
	}
	for _, m := range s.State.NodeMemory {
		if m.RAMTotal == nil || m.RAMAvailable == nil || m.RAMAvailable.InBytes > m.RAMTotal.InBytes {
			continue // unknown is unknown, not 0
		}
		st.MemTotal += m.RAMTotal.InBytes
		st.MemUsed += m.RAMTotal.InBytes - m.RAMAvailable.InBytes
		st.MemNodes++
	}
	for _, r := range s.State.Runners {
		st.Runners[r.Status]++
	}
	st.TracesUnknown = s.TracesErr != nil
	for _, t := range s.Traces {
		if !st.HasTrace || t.CreatedAt.After(st.Latest.CreatedAt) {
			st.Latest, st.HasTrace = t, true
		}
	}
	st.TokPerS, st.HasTok = s.TokPerS, s.HasTokPerS
	return st
}

// Title is the menu-bar title: "3 nodes · 41 tok/s".
func (s Status) Title() string {
	if !s.Online {
		return "Orrery · offline"
	}
	t := plural(s.Nodes, "node")
	if s.HasTok {
		t += fmt.Sprintf(" · %.0f tok/s", s.TokPerS)
	}
	return t
}

// Tooltip is the title and the status lines.
func (s Status) Tooltip() string {
	l := s.Lines()
	return "Orrery: " + s.Title() + "\n" + strings.Join(l[:], "\n")
}

// Lines are the menu's status lines: nodes, memory, runners, latest trace.
func (s Status) Lines() [NumLines]string {
	if !s.Online {
		return [NumLines]string{"Nodes: – (agent unreachable)", "Memory: –", "Runners: –", "Latest trace: –"}
	}
	var l [NumLines]string
	l[0] = fmt.Sprintf("Nodes: %d", s.Nodes)
	if s.MemNodes == 0 {
		l[1] = "Memory: not reported"
	} else {
		l[1] = fmt.Sprintf("Memory: %s / %s used", gb(s.MemUsed), gb(s.MemTotal))
		if s.MemNodes < s.Nodes {
			l[1] += fmt.Sprintf(" (%d of %d nodes)", s.MemNodes, s.Nodes)
		}
	}
	l[2] = "Runners: " + runnerSummary(s.Runners)
	switch {
	case s.TracesUnknown:
		l[3] = "Latest trace: unavailable"
	case s.HasTrace:
		l[3] = fmt.Sprintf("Latest trace: %s · %s", s.Latest.TaskID, age(s.Now.Sub(s.Latest.CreatedAt)))
	default:
		l[3] = "Latest trace: none"
	}
	return l
}

func runnerSummary(by map[string]int) string {
	if len(by) == 0 {
		return "none"
	}
	names := make([]string, 0, len(by))
	for n := range by {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%d %s", by[n], n)
	}
	return strings.Join(parts, ", ")
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}

// gb formats bytes in decimal gigabytes, as macOS does.
func gb(b uint64) string { return fmt.Sprintf("%.1f GB", float64(b)/1e9) }

func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", max(int(d/time.Second), 0))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd ago", int(d/(24*time.Hour)))
	}
}
