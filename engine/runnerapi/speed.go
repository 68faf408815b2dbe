package runnerapi

import (
	"fmt"
	"slices"
	"time"
)

// Speed is a node's compute as a short micro-benchmark measured it
// (engine/backend/ggml.MeasureSpeed, run by `orrery speed` and by the
// agent at start): what placement's cost model predicts a rank's time per
// token from. The figures are the backend's own kernels, with the
// runner's thread count.
type Speed struct {
	Threads int `json:"threads"`
	// MemBytesPerSec is the rate a one-row product streams an F32 matrix
	// far larger than the caches: the memory bandwidth weights are read at
	// (a kernel is never faster than this on a large model).
	MemBytesPerSec float64 `json:"memBytesPerSec"`
	// StreamRatio is a Q8_0 matrix far larger than the caches against one
	// that stays in them (one-row products): how much streaming weights
	// from memory slows a kernel down, applied to every type.
	StreamRatio float64 `json:"streamRatio"`
	// Types holds each weight type's kernels on a matrix that stays in
	// the caches: their compute bound.
	Types map[string]TypeSpeed `json:"types"`
	// LayerMicros and TokenMicros are what a real forward pass of one
	// token costs beyond its matrix products, per block and per pass
	// (building and launching the graph, norms, RoPE, attention over a
	// short cache, the head of a small vocabulary): measured on two tiny
	// generated models of 4 and 16 blocks.
	LayerMicros float64 `json:"layerMicros"`
	TokenMicros float64 `json:"tokenMicros"`
	// ReduceMicros is the median all-reduce of one decode row (2048 f32)
	// between two ranks on this node over loopback, and HopMicros half a
	// loopback round trip: the software cost of one collective step and
	// of one hop through an agent's relay. Measured by the runner.
	ReduceMicros float64 `json:"reduceMicros"`
	HopMicros    float64 `json:"hopMicros"`
	// GPUs are the node's GPUs as ggml lists them (a software one only
	// when the node allows it: --gpu-software), each measured as the CPU
	// is, in a process of its own; none on a node without one.
	GPUs []GPUSpeed `json:"gpus,omitempty"`
	// Version is the build that measured it; MeasuredAt when; Seconds how
	// long the benchmark took.
	Version    string    `json:"version,omitempty"`
	MeasuredAt time.Time `json:"measuredAt"`
	Seconds    float64   `json:"seconds"`
}

// GPUSpeed is one GPU's compute, measured as Speed measures the CPU's:
// its kernels on the device, the device memory's bandwidth, and what a
// pass on it costs beyond its products.
type GPUSpeed struct {
	// Device is the GPU as ggml listed it when it was measured (its free
	// memory then).
	Device Device `json:"device"`
	// MemBytesPerSec, StreamRatio and Types are as Speed's, the matrices
	// in the device's memory.
	MemBytesPerSec float64              `json:"memBytesPerSec"`
	StreamRatio    float64              `json:"streamRatio"`
	Types          map[string]TypeSpeed `json:"types,omitempty"`
	// LayerMicros and TokenMicros are a pass's own cost on the device
	// beyond its products, per block and per pass (launching the graph's
	// kernels, the activations in and the logits out), from the same two
	// tiny models as the CPU's, every block on the device.
	LayerMicros float64 `json:"layerMicros"`
	TokenMicros float64 `json:"tokenMicros"`
	// CrossMicros is what one trip of a decode row through the host costs
	// a pass on the device (to the host, an op there, back): what each
	// tensor-parallel sum of a block on the GPU pays, the sum being a CPU
	// op. 0: not measured.
	CrossMicros float64 `json:"crossMicros,omitempty"`
	// Seconds is how long its measurement took; Error why it failed (the
	// figures are then absent, and the cost model takes the CPU's).
	Seconds float64 `json:"seconds"`
	Error   string  `json:"error,omitempty"`
}

// Speed is the GPU's figures in a Speed's shape (no threads, no
// collective), for the formulas that take one.
func (g GPUSpeed) Speed() Speed {
	return Speed{MemBytesPerSec: g.MemBytesPerSec, StreamRatio: g.StreamRatio, Types: g.Types,
		LayerMicros: g.LayerMicros, TokenMicros: g.TokenMicros}
}

// Check says what makes g unusable for a prediction.
func (g GPUSpeed) Check() error {
	if g.Error != "" {
		return fmt.Errorf("GPU %s: %s", g.Device, g.Error)
	}
	sp := g.Speed()
	if err := sp.Check(); err != nil {
		return fmt.Errorf("GPU %s: %w", g.Device, err)
	}
	return nil
}

// GPU is the measured speed of the device with id and library, false
// when none (or its measurement failed).
func (s *Speed) GPU(id, library string) (GPUSpeed, bool) {
	if s == nil {
		return GPUSpeed{}, false
	}
	for _, g := range s.GPUs {
		if g.Device.ID == id && g.Device.Library == library && g.Check() == nil {
			return g, true
		}
	}
	return GPUSpeed{}, false
}

// Devices are the GPUs listed with the speed, measured or not.
func (s *Speed) Devices() []Device {
	if s == nil {
		return nil
	}
	var out []Device
	for _, g := range s.GPUs {
		out = append(out, g.Device)
	}
	return out
}

// TypeSpeed is one weight type's kernels.
type TypeSpeed struct {
	// DecodeBytesPerSec: weight bytes per second of a one-row product
	// (on ggml's plain layout: see MeasureSpeed).
	DecodeBytesPerSec float64 `json:"decodeBytesPerSec"`
	// PrefillFlopsPerSec: 2·rows·cols·batch per second of a 64-row one.
	PrefillFlopsPerSec float64 `json:"prefillFlopsPerSec"`
	// BitsPerWeight of the type, to stand in for types not measured.
	BitsPerWeight float64 `json:"bitsPerWeight"`
}

// DecodeRate is the bytes per second a one-row product of type t reads
// a large matrix at: its kernel slowed by StreamRatio, at most the memory
// bound.
func (s *Speed) DecodeRate(t TypeSpeed) float64 {
	r := t.DecodeBytesPerSec
	if s.StreamRatio > 0 {
		r *= s.StreamRatio
	}
	return min(r, s.MemBytesPerSec)
}

// Type is the speed of weight type name: measured, else the measured
// type nearest in bits per weight (bits: the type's), else false.
func (s *Speed) Type(name string, bits float64) (TypeSpeed, bool) {
	if t, ok := s.Types[name]; ok {
		return t, true
	}
	names := make([]string, 0, len(s.Types))
	for n := range s.Types {
		names = append(names, n)
	}
	slices.Sort(names) // ties broken the same way every time
	best, found := TypeSpeed{}, false
	for _, n := range names {
		t := s.Types[n]
		if !found || abs(t.BitsPerWeight-bits) < abs(best.BitsPerWeight-bits) {
			best, found = t, true
		}
	}
	return best, found
}

// Check says what makes s unusable for a prediction.
func (s *Speed) Check() error {
	if s == nil {
		return fmt.Errorf("no speed measured")
	}
	if s.MemBytesPerSec <= 0 || len(s.Types) == 0 || s.StreamRatio <= 0 {
		return fmt.Errorf("speed without memory bandwidth or kernel figures")
	}
	for n, t := range s.Types {
		if t.DecodeBytesPerSec <= 0 || t.PrefillFlopsPerSec <= 0 {
			return fmt.Errorf("speed of %s: %+v", n, t)
		}
	}
	return nil
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
