//go:build !unix

package app

import "errors"

// ErrRunning is returned by AcquireInstance when another instance runs.
var ErrRunning = errors.New("another Orrery desktop app runs for this data dir")

// Instance is the lock of the running desktop app; without Unix sockets
// and flock there is none, and every launch runs.
type Instance struct{}

// AcquireInstance takes no lock on this OS.
func AcquireInstance(dir string, show func()) (*Instance, error) { return &Instance{}, nil }

// Close does nothing.
func (*Instance) Close() {}
