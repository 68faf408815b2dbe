// Package agent runs one Orrery node: its identity, its samplers, its state
// store and its local HTTP API. In this version the node is its own master;
// the cluster layer will swap the local sequencer for the replicated one.
package agent
