// Package client is the one Go client of the agent's local HTTP API (see
// agent/api): the CLI, the desktop app, bench, demo and doctor all use it.
//
// A Client is a base URL plus an *http.Client; every method sends one
// request, decodes the answer into the API's own types (agent/api,
// agent/state, cluster, cluster/discovery, engine/trace) and turns an
// answer other than 2xx into an *Error carrying the agent's message. Path
// segments are escaped in one place (path), queries with url.Values.
package client
