// Package state holds the cluster state, the typed events that change it and
// the one pure function that folds an event into a state.
//
// The flow is: local samplers emit events → the master gives each a global
// index → every node appends the indexed event to its Log and folds it with
// Apply. Readers (the API, the UI) only ever see State values, which are
// never mutated once published: Apply copies what it changes.
package state
