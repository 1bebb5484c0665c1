//go:build !linux

package lambdastack

import (
	"os"
	"syscall"
)

// The emulator runs only on Linux; elsewhere this package builds but
// StartFunction fails when the emulator cannot run.
func sysProcAttr() *syscall.SysProcAttr { return nil }

func kill(p *os.Process) { _ = p.Kill() }
