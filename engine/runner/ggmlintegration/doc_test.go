// Package ggmlintegration is tests only, not a test kit: it runs
// engine/runner end to end on the real ggml backend (single rank, pipeline
// and sharded models, logprobs). The tests live apart from engine/runner so
// that fuzzing engine/runner does not rebuild ggml with fuzz instrumentation.
// Nothing imports this package.
package ggmlintegration
