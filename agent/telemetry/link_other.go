//go:build !linux && !darwin

package telemetry

type noLinks struct{}

func newLinkProber() linkProber { return noLinks{} }

func (noLinks) Probe(string) linkInfo { return linkInfo{Kind: KindUnknown} }
