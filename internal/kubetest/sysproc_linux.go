package kubetest

import (
	"os"
	"syscall"
)

// sysProcAttr makes the kernel kill the API server when the test process dies
// without cleaning up (a panic, a timeout), so that no server outlives its test.
// The signal follows the death of the thread that started the server, which Go
// only ends for goroutines that exit while locked to it; tests of this package
// do not do that.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// freezeSignals are the signals that freeze and thaw a process.
func freezeSignals() (freeze, thaw os.Signal, err error) {
	return syscall.SIGSTOP, syscall.SIGCONT, nil
}
