//go:build !linux

package ctl

import (
	"errors"
	"runtime"

	"github.com/weftnet/weft/backend"
)

var errNoDoctor = errors.New("doctor is not available on " + runtime.GOOS + " yet: it reads the Linux kernel's state")

func doctorSupported() error { return errNoDoctor }

func inspectKernel(*backend.State) (*Kernel, error) { return nil, errNoDoctor }
