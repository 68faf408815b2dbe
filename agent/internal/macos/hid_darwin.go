package macos

import (
	"fmt"
	"math"
	"sync"
)

// Private IOKit HID event-system constants (IOHIDEventTypes.h and
// AppleHIDUsageTables.h; not in the public SDK).
const (
	hidPageAppleVendor            = 0xff00
	hidUsageAppleVendorTempSensor = 5
	hidEventTypeTemperature       = 15
	hidTemperatureLevelField      = hidEventTypeTemperature << 16 // IOHIDEventFieldBase
)

type hidAPI struct {
	clientCreate       func(alloc uintptr) CFRef
	clientSetMatching  func(client, match CFRef) int32
	clientCopyServices func(client CFRef) CFRef
	serviceCopyProp    func(svc, key CFRef) CFRef
	serviceCopyEvent   func(svc CFRef, typ int64, options int32, timestamp int64) CFRef
	eventGetFloatValue func(event CFRef, field int32) float64
}

var loadHID = sync.OnceValues(func() (*hidAPI, error) {
	h, err := ioKitHandle()
	if err != nil {
		return nil, err
	}
	a := &hidAPI{}
	err = bindAll(h, "IOKit HID", []binding{
		{&a.clientCreate, "IOHIDEventSystemClientCreate"},
		{&a.clientSetMatching, "IOHIDEventSystemClientSetMatching"},
		{&a.clientCopyServices, "IOHIDEventSystemClientCopyServices"},
		{&a.serviceCopyProp, "IOHIDServiceClientCopyProperty"},
		{&a.serviceCopyEvent, "IOHIDServiceClientCopyEvent"},
		{&a.eventGetFloatValue, "IOHIDEventGetFloatValue"},
	})
	if err != nil {
		return nil, err
	}
	return a, nil
})

// HIDTemperatures is the set of Apple-vendor temperature sensors seen by
// the HID event system (how Apple silicon exposes die temperatures).
// Not safe for concurrent use.
type HIDTemperatures struct {
	api      *hidAPI
	client   CFRef
	services CFRef // owned CFArray; service refs below are borrowed from it
	names    []string
	svcs     []CFRef
}

// OpenHIDTemperatures enumerates the temperature sensors once; the sensor
// set is fixed for the life of the machine.
func OpenHIDTemperatures() (*HIDTemperatures, error) {
	api, err := loadHID()
	if err != nil {
		return nil, err
	}
	match, err := newInt32Dict(map[string]int32{
		"PrimaryUsagePage": hidPageAppleVendor,
		"PrimaryUsage":     hidUsageAppleVendorTempSensor,
	})
	if err != nil {
		return nil, err
	}
	defer Release(match)
	client := api.clientCreate(0)
	if client == 0 {
		return nil, fmt.Errorf("macos: IOHIDEventSystemClientCreate failed")
	}
	api.clientSetMatching(client, match)
	services := api.clientCopyServices(client)
	n := ArrayCount(services)
	if n == 0 {
		Release(services)
		Release(client)
		return nil, fmt.Errorf("macos: no HID temperature sensors")
	}
	t := &HIDTemperatures{api: api, client: client, services: services}
	product, err := NewString("Product")
	if err != nil {
		t.Close()
		return nil, err
	}
	defer Release(product)
	for i := range n {
		svc := ArrayValue(services, i)
		if svc == 0 {
			continue
		}
		p := api.serviceCopyProp(svc, product)
		name := GoString(p)
		Release(p)
		if name == "" {
			continue
		}
		t.names = append(t.names, name)
		t.svcs = append(t.svcs, svc)
	}
	if len(t.svcs) == 0 {
		t.Close()
		return nil, fmt.Errorf("macos: HID temperature sensors have no names")
	}
	return t, nil
}

// Names lists the sensors' Product names, e.g. "GPU MTR Temp Sensor1",
// "PMU tdie1"; index i matches Read(i).
func (t *HIDTemperatures) Names() []string { return t.names }

// Read returns sensor i in °C; ok is false when the sensor gave no event
// (it may be powered down) or an implausible value.
func (t *HIDTemperatures) Read(i int) (celsius float64, ok bool) {
	if t == nil || t.client == 0 || i < 0 || i >= len(t.svcs) {
		return 0, false
	}
	ev := t.api.serviceCopyEvent(t.svcs[i], hidEventTypeTemperature, 0, 0)
	if ev == 0 {
		return 0, false
	}
	defer Release(ev)
	v := t.api.eventGetFloatValue(ev, hidTemperatureLevelField)
	// Idle or absent sensors have been seen to report 0 or negative values.
	if math.IsNaN(v) || v <= 0 || v > 150 {
		return 0, false
	}
	return v, true
}

// Close releases the client and service list; safe to call more than once.
func (t *HIDTemperatures) Close() {
	if t == nil {
		return
	}
	Release(t.services)
	Release(t.client)
	t.services, t.client, t.svcs, t.names = 0, 0, nil, nil
}
