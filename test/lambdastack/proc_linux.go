package lambdastack

import (
	"os"
	"syscall"
)

// sysProcAttr: the emulator and the bootstrap it starts share one process
// group, killed together; the kernel kills the emulator should the test
// binary die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }
