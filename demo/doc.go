// Package demo runs `orrery demo`: a cluster of N agent processes on this
// machine that find each other through a shared loopback dir and share a
// cluster key. Run starts them, waits until they agree on one master,
// prints their table, leaves a ring-benchmark trace, places a generated
// random-weight model across every node and streams one chat completion
// through node 0, then keeps them up until its context ends.
//
// Every call to the agents goes through agent/api/client. The CLI
// (cmd/orrery) parses the flags and calls Run.
package demo
