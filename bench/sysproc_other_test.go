//go:build !linux

package bench

import "syscall"

// sysProcAttr: outside Linux, servers are stopped by TestMain only.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// processCPU: not measured outside Linux.
func processCPU() float64 { return 0 }
