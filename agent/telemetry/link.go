package telemetry

// Interface kinds, as reported in nodeNetwork. "vpn" covers tunnels too.
const (
	KindLoopback    = "loopback"
	KindWiFi        = "wifi"
	KindEthernet    = "ethernet"
	KindThunderbolt = "thunderbolt"
	KindBridge      = "bridge"
	KindVPN         = "vpn"
	KindVirtual     = "virtual"
	KindUnknown     = "unknown"
)

// linkInfo is what the OS says about one interface's medium.
type linkInfo struct {
	Kind string
	// SpeedMbps is the OS-reported link speed in Mbit/s; nil when the OS
	// does not report one (virtual links, Wi-Fi on Linux, a down link).
	SpeedMbps *int64
}

// linkProber classifies interfaces. Implementations live in link_<os>.go.
// Probe is called from one goroutine; loopback is decided by the caller from
// the interface flags, so Probe is never asked about it.
type linkProber interface {
	Probe(name string) linkInfo
}
