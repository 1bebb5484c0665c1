//go:build unix && !linux

package devstack

import (
	"os"
	"syscall"
)

// sysProcAttr puts a child in its own process group so Close can signal
// everything it spawned. Outside Linux there is no parent-death signal: a
// killed parent leaves its children running.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

func terminate(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGTERM) }

func kill(p *os.Process) { _ = syscall.Kill(-p.Pid, syscall.SIGKILL) }

func lockFile(f *os.File) error { return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) }

// canLock: lockFile really locks, so a lock that can be taken has no owner.
const canLock = true
