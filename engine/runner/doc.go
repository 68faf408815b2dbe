// Package runner generates text with a loaded model: the generation loop
// (batched prefill, token-by-token decode through the KV cache, sampling,
// stop strings, tracing) and the HTTP server a runner child process serves
// on loopback; the agent drives it with engine/runnerapi's Client. See
// README.md for how a request flows through it.
//
// The agent never loads a model itself: it starts `orrery runner` as a
// child process (see agent/supervisor), so that a crash in native code
// takes down the runner, not the agent. This package does not import the
// ggml backend; the runner command passes its loader in.
package runner
