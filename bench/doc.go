// Package bench measures Orrery: a running cluster through its API
// (Cluster: tok/s, time to first token, peak memory and energy per
// placement of a model), the ring benchmark's result (PrintRing), and one
// model in this process (Engine, like llama-bench).
//
// The CLI (cmd/orrery: orrery bench, ring-bench, engine-bench) parses
// flags and calls in here. Engine takes the model loader as an argument,
// so that this package stays pure Go and the cgo ggml backend is linked
// only by the binary that passes ggml.Load.
package bench
