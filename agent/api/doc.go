// Package api is the agent's local HTTP API: node id, state (whole and by
// path, in exo's shapes), the event log (JSON and Server-Sent Events), the
// memory history and a health check.
//
// It is meant for 127.0.0.1. Every request passes a Host check (so a web
// page elsewhere cannot reach it by DNS rebinding), a body size limit and a
// method check; every error is JSON: {"error": "…"}.
package api
