package linux

import (
	"fmt"
	"net"
	"strings"
	"testing"
)

// TestEnsureVXLANPortBound: a program holding the VXLAN port keeps the device down, and the
// error names the port.
func TestEnsureVXLANPortBound(t *testing.T) {
	f := newFixture(t, testLog(t))
	conn, err := net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", defaultVXLANPort))
	f.must(err)
	defer conn.Close()
	_, err = f.p.EnsureVXLAN(testDevice())
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("UDP port %d is already bound", defaultVXLANPort)) {
		t.Fatalf("EnsureVXLAN with its port bound: %v; want an error naming the port", err)
	}
	t.Log(err)
}
