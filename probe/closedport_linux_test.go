package probe

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"
)

// TestClosedPort: TCP and UDP to a closed port of an address that exists get through (a RST,
// a port unreachable), and so does TCP to a port someone listens on; toward an address nobody
// holds both are lost, not errors.
func TestClosedPort(t *testing.T) {
	lonelyNetns(t)
	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	up, nobody := netip.MustParseAddr("10.99.0.1"), netip.MustParseAddr("10.99.0.2")
	for _, proto := range []string{"tcp", "udp"} {
		if err := (ClosedPort{}).Check(ctx(), up, proto); err != nil {
			t.Errorf("%s to a closed port of %s: %v; want it through", proto, up, err)
		}
		start := time.Now()
		if err := (ClosedPort{}).Check(ctx(), nobody, proto); !errors.Is(err, ErrLost) {
			t.Errorf("%s to %s, which nobody holds: %v; want ErrLost", proto, nobody, err)
		} else if took := time.Since(start); took > time.Second {
			t.Errorf("%s to %s: lost after %v; want the context's 500ms", proto, nobody, took)
		}
	}
	ln, err := net.Listen("tcp", "10.99.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	if err := (ClosedPort{Port: port}).Check(ctx(), up, "tcp"); err != nil {
		t.Errorf("tcp to a port someone listens on: %v; want it through", err)
	}
}
