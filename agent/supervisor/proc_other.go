//go:build !linux

package supervisor

import "os/exec"

// setParentDeath: only Linux has a parent-death signal; elsewhere the
// runner exits when its stdin (the agent's pipe) closes.
func setParentDeath(*exec.Cmd) {}
