//go:build !linux

package probe

import (
	"errors"
	"net"
)

// forbidFragments is not written for this system: sized echoes are refused.
func forbidFragments(*net.IPConn, bool) error { return errors.ErrUnsupported }
