package probe

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/internal/netnstest"
)

// TestICMP: real echo requests in a namespace of their own: answered by the namespace's own
// addresses, lost (not an error) toward an address nobody holds, and concurrent pings matched
// to their own answers.
func TestICMP(t *testing.T) {
	lonelyNetns(t)
	c, err := ListenICMP()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	ctx := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}
	errs := make(chan error, 20)
	for range 10 {
		for _, a := range []string{"127.0.0.1", "10.99.0.1", "::1"} {
			go func() {
				_, err := c.Ping(ctx(), netip.MustParseAddr(a))
				errs <- err
			}()
		}
	}
	for range 30 {
		if err := <-errs; err != nil {
			t.Errorf("ping: %v", err)
		}
	}
	if rtt, err := c.Ping(ctx(), netip.MustParseAddr("10.99.0.2")); !errors.Is(err, ErrLost) {
		t.Errorf("ping to an address nobody holds: %v, %v; want ErrLost", rtt, err)
	}
}

// lonelyNetns moves the test into a namespace of its own with lo up and a link v0 holding
// 10.99.0.1/24 whose far side holds no address: what is sent to 10.99.0.2 goes unanswered.
func lonelyNetns(t *testing.T) {
	t.Helper()
	netnstest.Enter(t)
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	// A link whose far side holds no address: requests to 10.99.0.2 go unanswered.
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v0"}, PeerName: "v1"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"v0", "v1"} {
		l, err := netlink.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "v0" {
			addr, _ := netlink.ParseAddr("10.99.0.1/24")
			if err := netlink.AddrAdd(l, addr); err != nil {
				t.Fatal(err)
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}
