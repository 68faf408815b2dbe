package macos

import (
	"fmt"
	"sync"
)

type scAPI struct {
	copyComputerName          func(store uintptr, encoding uintptr) CFRef
	interfaceCopyAll          func() CFRef
	interfaceGetBSDName       func(iface CFRef) CFRef
	interfaceGetType          func(iface CFRef) CFRef
	interfaceGetLocalizedName func(iface CFRef) CFRef
}

var loadSC = sync.OnceValues(func() (*scAPI, error) {
	if _, err := loadCF(); err != nil {
		return nil, err
	}
	h, err := openLib(pathSystemConfiguration)
	if err != nil {
		return nil, err
	}
	a := &scAPI{}
	err = bindAll(h, "SystemConfiguration", []binding{
		{&a.copyComputerName, "SCDynamicStoreCopyComputerName"},
		{&a.interfaceCopyAll, "SCNetworkInterfaceCopyAll"},
		{&a.interfaceGetBSDName, "SCNetworkInterfaceGetBSDName"},
		{&a.interfaceGetType, "SCNetworkInterfaceGetInterfaceType"},
		{&a.interfaceGetLocalizedName, "SCNetworkInterfaceGetLocalizedDisplayName"},
	})
	if err != nil {
		return nil, err
	}
	return a, nil
})

// ComputerName returns the user-facing computer name (System Settings >
// General > Sharing), which unlike the hostname may contain spaces.
func ComputerName() (string, error) {
	sc, err := loadSC()
	if err != nil {
		return "", err
	}
	ref := sc.copyComputerName(0, 0)
	if ref == 0 {
		return "", fmt.Errorf("macos: SCDynamicStoreCopyComputerName returned NULL")
	}
	defer Release(ref)
	name := GoString(ref)
	if name == "" {
		return "", fmt.Errorf("macos: empty ComputerName")
	}
	return name, nil
}

// NetworkInterface is what SystemConfiguration says about one interface.
type NetworkInterface struct {
	BSDName     string // e.g. "en0"
	Type        string // kSCNetworkInterfaceType*, e.g. "IEEE80211", "Ethernet"
	DisplayName string // localized, e.g. "Wi-Fi", "Thunderbolt 1"
}

// NetworkInterfaces lists the interfaces SystemConfiguration knows about;
// those without a BSD name (e.g. unconfigured PPP) are omitted.
func NetworkInterfaces() ([]NetworkInterface, error) {
	sc, err := loadSC()
	if err != nil {
		return nil, err
	}
	arr := sc.interfaceCopyAll()
	if arr == 0 {
		return nil, fmt.Errorf("macos: SCNetworkInterfaceCopyAll returned NULL")
	}
	defer Release(arr)
	n := ArrayCount(arr)
	out := make([]NetworkInterface, 0, n)
	for i := range n {
		iface := ArrayValue(arr, i)
		if iface == 0 {
			continue
		}
		bsd := GoString(sc.interfaceGetBSDName(iface))
		if bsd == "" {
			continue
		}
		out = append(out, NetworkInterface{
			BSDName:     bsd,
			Type:        GoString(sc.interfaceGetType(iface)),
			DisplayName: GoString(sc.interfaceGetLocalizedName(iface)),
		})
	}
	return out, nil
}
