package daemon

import (
	"fmt"
	"net"
)

// sdNotify sends a state line ("READY=1", "STOPPING=1") to systemd when weftd runs as a
// Type=notify unit; socket is $NOTIFY_SOCKET, empty when there is none to tell.
func sdNotify(socket, state string) error {
	if socket == "" {
		return nil
	}
	if socket[0] == '@' {
		socket = "\x00" + socket[1:] // an abstract socket
	}
	conn, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: socket, Net: "unixgram"})
	if err != nil {
		return fmt.Errorf("notify systemd at %q: %w", socket, err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(state)); err != nil {
		return fmt.Errorf("notify systemd at %q: %w", socket, err)
	}
	return nil
}
