//go:build !linux && !windows

package main

import (
	"errors"
	"flag"
	"log/slog"
	"runtime"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
)

var errNoPlane = errors.New("weftd has no data plane for " + runtime.GOOS)

type planeFlags struct{}

func (f *planeFlags) addFlags(*flag.FlagSet) {}

func (f *planeFlags) platform(daemon.Config) daemon.Platform {
	return daemon.Platform{
		OpenPlanes: func(*slog.Logger) (backend.Plane, backend.Plane, error) { return nil, nil, errNoPlane },
		DefaultIf:  func() (string, error) { return "", errNoPlane },
	}
}
