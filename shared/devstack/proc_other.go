//go:build !unix

package devstack

import (
	"os"
	"syscall"
)

func sysProcAttr() *syscall.SysProcAttr { return nil }

func terminate(p *os.Process) { _ = p.Kill() }

func kill(p *os.Process) { _ = p.Kill() }

func lockFile(*os.File) error { return nil }

const canLock = false
