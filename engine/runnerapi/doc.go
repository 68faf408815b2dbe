// Package runnerapi is the contract between an agent and its runners, and
// what the replicated state keeps of the engine: everything that crosses
// a process boundary or sits in the event log, and nothing that computes.
//
//   - requests and their answers: Request, Piece, Done, Logprobs, the
//     embeddings, the NDJSON stream's messages, error bodies and the
//     sentinels they map to (ErrBadRequest, ErrPromptTooLong);
//   - the runner process's health and status, the agent's loopback
//     endpoints for rank links and spans, and the environment a runner is
//     started with (agentproto.go), with the client the agent drives a
//     runner with;
//   - the chat message, the speculation a request asks for, a node's
//     measured speed and a plan's prediction, and the Shape of an
//     instance: what agent/state stores.
//
// It imports only engine/sample, engine/grammar and engine/trace of
// Orrery (internal/archtest holds that), so that agent/state and
// agent/api depend on no runner, chat template or compute backend, and a
// refactor of those cannot change what is on the wire or on disk (as
// ollama's server never imports its runner, and tailscale's tailcfg holds
// what crosses between client and control server). The event log's JSON
// is held byte for byte by agent/state's TestEventLogWrittenBefore.
package runnerapi
