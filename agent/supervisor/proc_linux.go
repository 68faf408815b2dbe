package supervisor

import (
	"os/exec"
	"syscall"
)

// setParentDeath has the kernel kill the runner if the agent dies without
// stopping it (the runner also exits when its stdin closes).
func setParentDeath(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
