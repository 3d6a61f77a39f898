package leaserun

import "syscall"

// setParentDeathSignal has the kernel kill the command if leasehold run dies
// (say, by SIGKILL): nobody would stop it when the lease it runs under is lost.
func setParentDeathSignal(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
