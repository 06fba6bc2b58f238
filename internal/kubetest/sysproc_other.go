//go:build !linux

package kubetest

import "syscall"

// sysProcAttr is nil elsewhere: kube-apiserver is only built for Linux here,
// and tests skip without it.
func sysProcAttr() *syscall.SysProcAttr { return nil }
