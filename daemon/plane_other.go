//go:build !linux && !windows

package daemon

import (
	"errors"
	"log/slog"
	"runtime"
)

var errNoPlane = errors.New("weftd has no data plane for " + runtime.GOOS + " yet")

func newPlane(*slog.Logger) (Plane, error) { return nil, errNoPlane }

func defaultRouteInterface() (string, error) { return "", errNoPlane }
