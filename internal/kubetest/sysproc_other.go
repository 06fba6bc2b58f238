//go:build !linux

package kubetest

import (
	"errors"
	"os"
	"syscall"
	"time"
)

// sysProcAttr is nil elsewhere: kube-apiserver is only built for Linux here,
// and tests skip without it.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// freezeSignals fails: only Linux has signals that freeze a process here.
func freezeSignals() (freeze, thaw os.Signal, err error) {
	return nil, nil, errors.New("kubetest: freezing a process needs SIGSTOP")
}

// waitStopped is never called: freezeSignals fails first.
func waitStopped(pid int, limit time.Duration) error {
	return errors.New("kubetest: waiting for a stopped process needs /proc")
}
