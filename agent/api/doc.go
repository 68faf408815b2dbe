// Package api is the agent's HTTP API: node id and health, state (whole and
// by path, in exo's shapes), the event log (JSON and Server-Sent Events),
// histories, the cluster's view and ring benchmark, traces (list, stats,
// raw, Perfetto hand-off), inference (OpenAI chat and text completions,
// Anthropic Messages, Ollama's API, tokenize, models, instances) and
// Prometheus metrics. What it serves comes
// through small interfaces (Inference, ClusterView, DiscoveryView,
// TraceStore) that the agent's packages implement; no value of type any
// crosses them.
//
// It is meant for 127.0.0.1. Every request passes a Host check (so a web
// page elsewhere cannot reach it by DNS rebinding), a body size limit and a
// method check; every error is JSON: {"error": "…"}, or the protocol's own
// shape on the OpenAI, Anthropic and Ollama routes. PeerHandler serves the same API to other nodes, for
// requests forwarded to the node that can answer them.
package api
