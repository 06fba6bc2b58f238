//go:build !linux

package ctl

import (
	"errors"
	"runtime"
)

// thisSystem: the doctor reads the Linux kernel's data plane; on other OSes it has nothing
// to look at yet.
func thisSystem() (system, error) {
	return system{}, errors.New("doctor is not available on " + runtime.GOOS + " yet: it reads the Linux kernel's state")
}
