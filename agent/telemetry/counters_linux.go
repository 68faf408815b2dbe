package telemetry

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

func readCounters() (map[string]ifCounters, error) { return readProcNetDev("/proc/net/dev") }

// readProcNetDev parses /proc/net/dev: two header lines, then
// "name: rxbytes rxpkts … (8 rx fields) txbytes txpkts …".
func readProcNetDev(path string) (map[string]ifCounters, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("interface counters: %w", err)
	}
	defer f.Close()
	out := map[string]ifCounters{}
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if line < 2 || !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) < 10 {
			return nil, fmt.Errorf("interface counters: %s line %d: %d fields, want ≥ 10", path, line+1, len(fields))
		}
		var v [4]uint64
		for i, col := range []int{0, 1, 8, 9} {
			if v[i], err = strconv.ParseUint(fields[col], 10, 64); err != nil {
				return nil, fmt.Errorf("interface counters: %s line %d: %w", path, line+1, err)
			}
		}
		out[strings.TrimSpace(name)] = ifCounters{BytesRecv: v[0], PacketsRecv: v[1], BytesSent: v[2], PacketsSent: v[3]}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("interface counters: %w", err)
	}
	return out, nil
}
