package macos

import (
	"errors"
	"fmt"
	"sync"
)

// libIOReport is private and undocumented; these signatures follow the
// headers reverse-engineered by asitop, macmon and exelban/stats.
type ioReportAPI struct {
	copyChannelsInGroup func(group, subgroup CFRef, a, b, c uint64) CFRef
	mergeChannels       func(dst, src, null CFRef)
	createSubscription  func(a uintptr, desired CFRef, subbed *CFRef, channelID uint64, b CFRef) CFRef
	createSamples       func(sub, subbed, a CFRef) CFRef
	createSamplesDelta  func(prev, cur, a CFRef) CFRef
	channelGetGroup     func(ch CFRef) CFRef
	channelGetSubGroup  func(ch CFRef) CFRef
	channelGetName      func(ch CFRef) CFRef
	channelGetUnitLabel func(ch CFRef) CFRef
	stateGetCount       func(ch CFRef) int32
	stateGetNameForIdx  func(ch CFRef, i int32) CFRef
	stateGetResidency   func(ch CFRef, i int32) int64
	simpleGetInteger    func(ch CFRef, i int32) int64
}

var loadIOReport = sync.OnceValues(func() (*ioReportAPI, error) {
	if _, err := loadCF(); err != nil {
		return nil, err
	}
	h, err := openLib(pathIOReport)
	if err != nil {
		return nil, err
	}
	a := &ioReportAPI{}
	err = bindAll(h, "IOReport", []binding{
		{&a.copyChannelsInGroup, "IOReportCopyChannelsInGroup"},
		{&a.mergeChannels, "IOReportMergeChannels"},
		{&a.createSubscription, "IOReportCreateSubscription"},
		{&a.createSamples, "IOReportCreateSamples"},
		{&a.createSamplesDelta, "IOReportCreateSamplesDelta"},
		{&a.channelGetGroup, "IOReportChannelGetGroup"},
		{&a.channelGetSubGroup, "IOReportChannelGetSubGroup"},
		{&a.channelGetName, "IOReportChannelGetChannelName"},
		{&a.channelGetUnitLabel, "IOReportChannelGetUnitLabel"},
		{&a.stateGetCount, "IOReportStateGetCount"},
		{&a.stateGetNameForIdx, "IOReportStateGetNameForIndex"},
		{&a.stateGetResidency, "IOReportStateGetResidency"},
		{&a.simpleGetInteger, "IOReportSimpleGetIntegerValue"},
	})
	if err != nil {
		return nil, err
	}
	return a, nil
})

// IOReportGroup selects channels; an empty SubGroup selects the whole group.
type IOReportGroup struct {
	Group, SubGroup string
}

// IOReportSubscription is a live subscription to some IOReport channels.
type IOReportSubscription struct {
	api     *ioReportAPI
	desired CFRef // mutable channel dictionary we asked for
	subbed  CFRef // channels actually subscribed, needed to sample
	sub     CFRef
}

func copyGroup(api *ioReportAPI, g IOReportGroup) (CFRef, error) {
	gs, err := NewString(g.Group)
	if err != nil {
		return 0, err
	}
	defer Release(gs)
	var ss CFRef
	if g.SubGroup != "" {
		if ss, err = NewString(g.SubGroup); err != nil {
			return 0, err
		}
		defer Release(ss)
	}
	ch := api.copyChannelsInGroup(gs, ss, 0, 0, 0)
	if ch == 0 {
		return 0, fmt.Errorf("macos: IOReport group %q/%q not found", g.Group, g.SubGroup)
	}
	return ch, nil
}

// NewIOReportSubscription subscribes to the given groups; groups that do
// not exist on this machine are skipped, and it fails only if none exist.
func NewIOReportSubscription(groups ...IOReportGroup) (*IOReportSubscription, error) {
	api, err := loadIOReport()
	if err != nil {
		return nil, err
	}
	cf, err := loadCF()
	if err != nil {
		return nil, err
	}
	var merged CFRef
	var errs []error
	for _, g := range groups {
		ch, err := copyGroup(api, g)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if merged == 0 {
			merged = ch
			continue
		}
		api.mergeChannels(merged, ch, 0)
		cf.release(ch)
	}
	if merged == 0 {
		return nil, errors.Join(append(errs, fmt.Errorf("macos: no IOReport channels"))...)
	}
	// Subscribe with a mutable copy, as the reference tools do: the
	// subscription call expects a CFMutableDictionary.
	n := cf.dictionaryGetCount(merged)
	desired := cf.dictionaryCreateMutableCopy(0, n, merged)
	cf.release(merged)
	if desired == 0 || n == 0 {
		Release(desired)
		return nil, fmt.Errorf("macos: IOReport channel dictionary empty")
	}
	var subbed CFRef
	sub := api.createSubscription(0, desired, &subbed, 0, 0)
	if sub == 0 {
		Release(subbed)
		cf.release(desired)
		return nil, fmt.Errorf("macos: IOReportCreateSubscription failed")
	}
	return &IOReportSubscription{api: api, desired: desired, subbed: subbed, sub: sub}, nil
}

// Sample takes an owned snapshot of all subscribed channels. Release it.
func (s *IOReportSubscription) Sample() (CFRef, error) {
	if s == nil || s.sub == 0 {
		return 0, fmt.Errorf("macos: IOReport subscription closed")
	}
	smp := s.api.createSamples(s.sub, s.subbed, 0)
	if smp == 0 {
		return 0, fmt.Errorf("macos: IOReportCreateSamples failed")
	}
	return smp, nil
}

// Close releases the subscription; safe to call more than once.
func (s *IOReportSubscription) Close() {
	if s == nil {
		return
	}
	Release(s.sub)
	Release(s.subbed)
	Release(s.desired)
	s.sub, s.subbed, s.desired = 0, 0, 0
}

// IOReportDelta returns an owned sample holding cur minus prev. Release it.
func IOReportDelta(prev, cur CFRef) (CFRef, error) {
	api, err := loadIOReport()
	if err != nil {
		return 0, err
	}
	if prev == 0 || cur == 0 {
		return 0, fmt.Errorf("macos: IOReportDelta needs two samples")
	}
	d := api.createSamplesDelta(prev, cur, 0)
	if d == 0 {
		return 0, fmt.Errorf("macos: IOReportCreateSamplesDelta failed")
	}
	return d, nil
}

// IOReportChannel is one channel dictionary inside a sample, borrowed from
// it: valid only while that sample is alive.
type IOReportChannel struct {
	api *ioReportAPI
	ref CFRef
}

// IOReportChannels lists the channels of a sample or delta by walking its
// "IOReportChannels" array (IOReportIterate needs an Objective-C block).
func IOReportChannels(sample CFRef) []IOReportChannel {
	api, err := loadIOReport()
	if err != nil || sample == 0 {
		return nil
	}
	arr := DictValue(sample, "IOReportChannels")
	n := ArrayCount(arr)
	out := make([]IOReportChannel, 0, n)
	for i := range n {
		if ch := ArrayValue(arr, i); ch != 0 {
			out = append(out, IOReportChannel{api: api, ref: ch})
		}
	}
	return out
}

// Group returns the channel's group name, e.g. "GPU Stats".
func (c IOReportChannel) Group() string { return GoString(c.api.channelGetGroup(c.ref)) }

// SubGroup returns the channel's subgroup, e.g. "GPU Performance States".
func (c IOReportChannel) SubGroup() string { return GoString(c.api.channelGetSubGroup(c.ref)) }

// Name returns the channel name, e.g. "GPUPH" or "GPU Energy".
func (c IOReportChannel) Name() string { return GoString(c.api.channelGetName(c.ref)) }

// Unit returns the channel's unit label, e.g. "mJ" (may be "").
func (c IOReportChannel) Unit() string { return GoString(c.api.channelGetUnitLabel(c.ref)) }

// StateCount returns the number of states of a state-format channel.
func (c IOReportChannel) StateCount() int { return int(c.api.stateGetCount(c.ref)) }

// StateName returns the name of state i, e.g. "OFF", "IDLE", "P3".
func (c IOReportChannel) StateName(i int) string {
	return GoString(c.api.stateGetNameForIdx(c.ref, int32(i)))
}

// StateResidency returns the time spent in state i, in IOReport ticks.
func (c IOReportChannel) StateResidency(i int) int64 {
	return c.api.stateGetResidency(c.ref, int32(i))
}

// IntegerValue returns a simple-format channel's value (e.g. an energy count).
func (c IOReportChannel) IntegerValue() int64 { return c.api.simpleGetInteger(c.ref, 0) }
