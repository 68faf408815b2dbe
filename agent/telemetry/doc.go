// Package telemetry samples the local machine: memory, CPU/GPU/temperature/
// power, disk and network interfaces. Each sampler turns one reading into a
// state event; Run drives a sampler on its interval and hands the events to
// the node's sequencer.
//
// A value the OS does not give is left nil (JSON null), never a made-up 0.
// OS-specific readers live in *_linux.go and *_darwin.go; the darwin ones
// call Apple frameworks through purego so that they type-check here with
// CGO_ENABLED=0, and are unverified until run on a Mac.
package telemetry
