package devstack

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in its own process group (so Close can signal
// everything it spawned) and has the kernel SIGKILL it when the thread that
// started it dies. The Go runtime only ends threads of goroutines that exit
// while locked to them, which never start children here.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

func terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

func kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }

func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// canLock: lockFile really locks, so a lock that can be taken has no owner.
const canLock = true
