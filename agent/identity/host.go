package identity

// hostInfo is what the operating system tells about this machine. Each OS
// fills it in probe_<os>.go; a field the OS does not report stays empty
// (strings) or nil (counts), never a made-up value.
type hostInfo struct {
	// Fingerprint identifies the physical machine: IOPlatformUUID on macOS,
	// /etc/machine-id on Linux. Empty when unknown.
	Fingerprint string
	// FriendlyName is the user-facing name: ComputerName on macOS, the
	// hostname on Linux.
	FriendlyName string
	// ModelID is the hardware model, e.g. "Mac14,13" or the DMI product name.
	ModelID string
	// Chip is the chip or CPU brand, e.g. "Apple M2 Max".
	Chip string
	// OSName, OSVersion and OSBuild, e.g. "macOS", "15.1", "24B83".
	OSName, OSVersion, OSBuild string
	// PerfCores and EffCores are the performance and efficiency core counts
	// where the OS reports them (hw.perflevel* on macOS; cpu_core/cpu_atom
	// on hybrid Intel Linux). Nil when unknown.
	PerfCores, EffCores *int
}
