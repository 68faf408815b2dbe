package telemetry

import (
	"fmt"
	"net"
	"unsafe"

	"golang.org/x/sys/unix"
)

// readCounters reads the 64-bit interface counters from the routing sysctl
// (NET_RT_IFLIST2), as netstat does, without running netstat. Unverified
// until run on a Mac.
func readCounters() (map[string]ifCounters, error) {
	buf, err := unix.SysctlRaw("net.route", 0, 0, unix.NET_RT_IFLIST2, 0)
	if err != nil {
		return nil, fmt.Errorf("interface counters: sysctl NET_RT_IFLIST2: %w", err)
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("interface counters: %w", err)
	}
	names := make(map[int]string, len(ifs))
	for _, i := range ifs {
		names[i.Index] = i.Name
	}
	out := map[string]ifCounters{}
	for len(buf) >= 4 {
		msgLen := int(*(*uint16)(unsafe.Pointer(&buf[0])))
		if msgLen < 4 || msgLen > len(buf) {
			return nil, fmt.Errorf("interface counters: bad message length %d", msgLen)
		}
		if buf[3] == unix.RTM_IFINFO2 && msgLen >= unix.SizeofIfMsghdr2 {
			var m unix.IfMsghdr2
			copy((*[unix.SizeofIfMsghdr2]byte)(unsafe.Pointer(&m))[:], buf[:unix.SizeofIfMsghdr2])
			if name, ok := names[int(m.Index)]; ok {
				out[name] = ifCounters{
					BytesSent: m.Data.Obytes, BytesRecv: m.Data.Ibytes,
					PacketsSent: m.Data.Opackets, PacketsRecv: m.Data.Ipackets,
				}
			}
		}
		buf = buf[msgLen:]
	}
	return out, nil
}
