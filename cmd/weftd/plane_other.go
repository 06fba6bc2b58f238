//go:build !linux && !windows

package main

import (
	"errors"
	"flag"
	"log/slog"
	"net/netip"
	"runtime"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
)

var errNoPlane = errors.New("weftd has no data plane for " + runtime.GOOS)

type planeFlags struct{}

func (f *planeFlags) addFlags(*flag.FlagSet) {}

func (f *planeFlags) newPlane(daemon.Config, *slog.Logger) (backend.Plane, backend.Plane, error) {
	return nil, nil, errNoPlane
}

func defaultRouteInterface() (string, error) { return "", errNoPlane }

func routeLookup() func(netip.Addr) (string, netip.Addr, error) { return nil }
