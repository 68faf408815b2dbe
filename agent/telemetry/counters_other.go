//go:build !linux && !darwin

package telemetry

import psnet "github.com/shirou/gopsutil/v4/net"

func readCounters() (map[string]ifCounters, error) {
	st, err := psnet.IOCounters(true)
	if err != nil {
		return nil, err
	}
	out := make(map[string]ifCounters, len(st))
	for _, s := range st {
		out[s.Name] = ifCounters{BytesSent: s.BytesSent, BytesRecv: s.BytesRecv, PacketsSent: s.PacketsSent, PacketsRecv: s.PacketsRecv}
	}
	return out, nil
}
