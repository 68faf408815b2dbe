package telemetry

import (
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/orrery-cluster/orrery/agent/internal/macos"
)

// linkRefreshEvery bounds how stale the SystemConfiguration interface list
// may get (adapters come and go with docks and Thunderbolt cables).
const linkRefreshEvery = 60 * time.Second

// darwinLinks classifies interfaces from SystemConfiguration's view of the
// hardware, falling back to BSD name conventions, and reads Ethernet link
// speed with SIOCGIFMEDIA.
type darwinLinks struct {
	now       func() time.Time
	kinds     map[string]string // BSD name -> Kind*
	refreshed time.Time
}

func newLinkProber() linkProber { return &darwinLinks{now: time.Now} }

func (d *darwinLinks) Probe(name string) linkInfo {
	d.refresh()
	kind, ok := d.kinds[name]
	if !ok {
		kind = kindFromBSDName(name)
	}
	li := linkInfo{Kind: kind}
	switch kind {
	case KindEthernet, KindThunderbolt, KindUnknown:
		li.SpeedMbps = mediaSpeedMbps(name)
	}
	return li
}

func (d *darwinLinks) refresh() {
	now := d.now()
	if d.kinds != nil && now.Sub(d.refreshed) < linkRefreshEvery {
		return
	}
	d.refreshed = now
	ifs, err := macos.NetworkInterfaces()
	if err != nil {
		// Keep the last good map; name rules cover the rest.
		if d.kinds == nil {
			d.kinds = map[string]string{}
		}
		return
	}
	m := make(map[string]string, len(ifs))
	for _, i := range ifs {
		if k := kindFromSC(i); k != "" {
			m[i.BSDName] = k
		}
	}
	d.kinds = m
}

// kindFromSC maps kSCNetworkInterfaceType* values; "" means no opinion.
func kindFromSC(i macos.NetworkInterface) string {
	switch i.Type {
	case "IEEE80211":
		return KindWiFi
	case "Ethernet":
		// Thunderbolt ports appear as Ethernet named "Thunderbolt N";
		// a Thunderbolt-to-Ethernet adapter ("Thunderbolt Ethernet
		// Slot N") is a real NIC and stays ethernet. The display name
		// is localized, but "Thunderbolt" is a trademark left as is.
		if strings.Contains(i.DisplayName, "Thunderbolt") && !strings.Contains(i.DisplayName, "Ethernet") {
			return KindThunderbolt
		}
		return KindEthernet
	case "Bridge":
		// "Thunderbolt Bridge" (bridge0) is the interface that carries
		// IP between Macs cabled by Thunderbolt: that is the link type
		// users care about, not that it is a bridge.
		if strings.Contains(i.DisplayName, "Thunderbolt") {
			return KindThunderbolt
		}
		return KindBridge
	case "PPP", "IPSec", "VPN":
		return KindVPN
	}
	return ""
}

// kindFromBSDName classifies interfaces SystemConfiguration does not list.
func kindFromBSDName(name string) string {
	has := func(prefixes ...string) bool {
		for _, p := range prefixes {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	switch {
	case has("utun", "ipsec", "ppp"):
		return KindVPN
	case has("bridge"):
		return KindBridge
	case has("awdl", "llw", "anpi", "ap", "gif", "stf"):
		return KindVirtual
	}
	return KindUnknown
}

// ifMediaReq mirrors struct ifmediareq from <net/if.h>. Darwin declares it
// under #pragma pack(4), so the trailing int *ifm_ulist sits at offset 36
// unaligned and the struct is 44 bytes on 64-bit too.
type ifMediaReq struct {
	name    [16]byte
	current int32
	mask    int32
	status  int32
	active  int32
	count   int32
	ulist   [2]uint32 // pointer we leave NULL; count 0 asks for no list
}

// The ioctl number encodes the struct size; a mismatch must fail the build.
const siocgifmediaSize = (unix.SIOCGIFMEDIA >> 16) & 0x1fff

var (
	_ [unsafe.Sizeof(ifMediaReq{}) - siocgifmediaSize]byte
	_ [siocgifmediaSize - unsafe.Sizeof(ifMediaReq{})]byte
)

// <net/if_media.h> values (stable since 10.x; checked against xnu).
const (
	ifmAvalid = 0x1
	ifmActive = 0x2
	ifmNMask  = 0xe0
	ifmTMask  = 0x1f
	ifmEther  = 0x20
)

// etherMbps maps IFM_ETHER subtypes 3..23 to Mbit/s. Newer or vendor
// media (Thunderbolt, 25G+) report autoselect or a subtype not here and
// get no speed rather than a guess.
func etherMbps(subtype int32) int64 {
	switch subtype {
	case 17: // HPNA_1
		return 1
	case 3, 4, 5, 12, 13: // 10_T, 10_2, 10_5, 10_STP, 10_FL
		return 10
	case 6, 7, 8, 9, 10: // 100_TX, _FX, _T4, _VG, _T2
		return 100
	case 11, 14, 15, 16: // 1000_SX, _LX, _CX, _T
		return 1000
	case 22: // 2500_T
		return 2500
	case 23: // 5000_T
		return 5000
	case 18, 19, 20, 21: // 10G_SR, _LR, _CX4, _T
		return 10000
	}
	return 0
}

// mediaSpeedMbps returns the active Ethernet media speed, or nil when the
// link is down, not Ethernet, autoselect-only or unknown.
func mediaSpeedMbps(name string) *int64 {
	var req ifMediaReq
	if len(name) >= len(req.name) {
		return nil
	}
	copy(req.name[:], name)
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	// x/sys exports no generic pointer ioctl on darwin; ioctl(2) is a
	// stable syscall number.
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(unix.SIOCGIFMEDIA), uintptr(unsafe.Pointer(&req)))
	if errno != 0 {
		return nil
	}
	if req.status&ifmAvalid == 0 || req.status&ifmActive == 0 {
		return nil
	}
	if req.active&ifmNMask != ifmEther {
		return nil
	}
	v := etherMbps(req.active & ifmTMask)
	if v == 0 {
		return nil
	}
	return &v
}
