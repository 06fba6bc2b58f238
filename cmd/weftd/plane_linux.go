package main

import (
	"flag"
	"log/slog"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
)

// planeFlags are the data plane's own flags on this OS: Linux has none.
type planeFlags struct{}

func (f *planeFlags) addFlags(*flag.FlagSet) {}

// newPlane opens the netlink data plane of the namespace weftd runs in.
func (f *planeFlags) newPlane(_ string, log *slog.Logger) (backend.Plane, error) {
	return linux.New(log)
}

func defaultRouteInterface() (string, error) { return linux.DefaultRouteInterface() }
