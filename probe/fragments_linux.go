package probe

import (
	"fmt"
	"net"

	"golang.org/x/sys/unix"
)

// forbidFragments makes what conn sends go whole or not at all: DF set (IPv6 is never
// fragmented on the way; IPV6_DONTFRAG keeps the host from doing it), and the path MTU the
// kernel learnt disregarded (the PROBE mode), so that a request as large as the device's MTU
// is sent, and shows whether the path carries it.
func forbidFragments(conn *net.IPConn, v6 bool) error {
	raw, err := conn.SyscallConn()
	if err != nil {
		return fmt.Errorf("probe: forbidding fragments: %w", err)
	}
	var serr error
	err = raw.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
			}
			return
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("probe: forbidding fragments: %w", err)
	}
	return nil
}
