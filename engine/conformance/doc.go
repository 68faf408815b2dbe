// Package conformance holds the tests that hold Orrery's engine against
// llama.cpp, the reference implementation of GGUF: the same token ids fed
// to both, logits compared at every position, on one rank and split over
// three, for every supported architecture and the common weight types.
// The reference is installed by scripts/llama-ref.sh (see
// internal/llamaref); `make conformance` runs these tests verbosely and
// prints the table that docs/conformance.md records.
package conformance
