//go:build !linux

package leaserun

import "syscall"

// setParentDeathSignal does nothing where the kernel has no parent-death
// signal: a command outlives a leasehold run that is killed.
func setParentDeathSignal(*syscall.SysProcAttr) {}
