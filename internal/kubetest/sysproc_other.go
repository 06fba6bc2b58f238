//go:build !linux

package kubetest

import (
	"os"
	"syscall"
	"testing"
)

// sysProcAttr is nil elsewhere: kube-apiserver is only built for Linux here,
// and tests skip without it.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// freezeSignals skips the test: only Linux has signals that freeze a process here.
func freezeSignals(t testing.TB) (freeze, thaw os.Signal) {
	t.Skip("kubetest: freezing a process needs SIGSTOP")
	return nil, nil
}
