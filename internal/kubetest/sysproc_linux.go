package kubetest

import (
	"os"
	"syscall"
	"testing"
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
func freezeSignals(testing.TB) (freeze, thaw os.Signal) { return syscall.SIGSTOP, syscall.SIGCONT }
