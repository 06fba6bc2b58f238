package probe

import (
	"context"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

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
				_, err := c.Ping(ctx(), netip.MustParseAddr(a), 0)
				errs <- err
			}()
		}
	}
	for range 30 {
		if err := <-errs; err != nil {
			t.Errorf("ping: %v", err)
		}
	}
	if rtt, err := c.Ping(ctx(), netip.MustParseAddr("10.99.0.2"), 0); !errors.Is(err, ErrLost) {
		t.Errorf("ping to an address nobody holds: %v, %v; want ErrLost", rtt, err)
	}

	// Sized echoes: as large as the link carries, answered (lo's MTU is 64 KiB); larger than
	// v0's 1500, refused before they leave rather than sent in fragments.
	for _, p := range []struct {
		to   string
		size int
	}{{"127.0.0.1", 1500}, {"127.0.0.1", 9000}, {"::1", 1500}, {"::1", 9000}} {
		if _, err := c.Ping(ctx(), netip.MustParseAddr(p.to), p.size); err != nil {
			t.Errorf("ping %s with %d bytes: %v", p.to, p.size, err)
		}
	}
	for _, to := range []string{"10.99.0.2", "fd99::2"} {
		if _, err := c.Ping(ctx(), netip.MustParseAddr(to), 1500); !errors.Is(err, ErrLost) {
			t.Errorf("ping %s with 1500 bytes (v0's MTU): %v; want it sent and lost", to, err)
		}
		_, err := c.Ping(ctx(), netip.MustParseAddr(to), 1501)
		if !errors.Is(err, syscall.EMSGSIZE) {
			t.Errorf("ping %s with 1501 bytes over v0's MTU of 1500: %v; want EMSGSIZE, not fragments", to, err)
		}
	}
}

// lonelyNetns moves the test into a namespace of its own with lo up and a link v0 holding
// 10.99.0.1/24 and fd99::1/64 whose far side holds no address: what is sent to 10.99.0.2
// or fd99::2 goes unanswered.
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
			for _, a := range []string{"10.99.0.1/24", "fd99::1/64"} {
				addr, _ := netlink.ParseAddr(a)
				addr.Flags = unix.IFA_F_NODAD
				if err := netlink.AddrAdd(l, addr); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
}
