package linux

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/backend"
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

// TestEnsureVXLANKeepsMAC: a device made with the MAC asked for (the lease's, when it was
// deleted under the daemon) has it, made again after a deletion too; an existing device keeps
// its own.
func TestEnsureVXLANKeepsMAC(t *testing.T) {
	f := newFixture(t, testLog(t))
	dev := testDevice()
	want, err := backend.ParseMAC("0e:77:65:66:74:01")
	f.must(err)
	dev.MAC = want
	for _, when := range []string{"made", "made again after its deletion"} {
		mac, err := f.p.EnsureVXLAN(dev)
		f.must(err)
		if got := macOf(f.link(vx).Attrs().HardwareAddr); mac != want || got != want {
			t.Errorf("%s: EnsureVXLAN returned %s, the device has %s; want %s", when, mac, got, want)
		}
		f.must(netlink.LinkDel(f.link(vx)))
	}
	dev.MAC = backend.MAC{}
	mine, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	dev.MAC = want
	if mac, err := f.p.EnsureVXLAN(dev); err != nil || mac != mine {
		t.Errorf("an existing device with MAC %s, asked for %s: EnsureVXLAN returned %s, %v; want it adopted with its own", mine, want, mac, err)
	}
}

// TestEnsureVXLANDrainsBeforeReplacing: an incompatible device is emptied of its routes and
// nexthop objects before it is deleted, each deleted on its own (the kernel says so for each,
// where a device's deletion takes its IPv4 routes without a word), and before the device.
// What runs through other devices stays.
func TestEnsureVXLANDrainsBeforeReplacing(t *testing.T) {
	f := newFixture(t, testLog(t))
	if !f.p.kernelNexthops {
		t.Skip("the kernel has no nexthop objects")
	}
	dev := testDevice()
	_, err := f.p.EnsureVXLAN(dev)
	f.must(err)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("nexthop", "add", "id", "7", "via", "10.1.0.0", "dev", vx, "onlink")
	ip("route", "add", "10.1.0.0/24", "nhid", "7")
	ip("route", "add", "10.2.0.0/24", "via", "10.2.0.0", "dev", vx, "onlink")
	ip("nexthop", "add", "id", "9", "via", "192.168.50.2", "dev", "ul0")
	ip("route", "add", "10.9.0.0/24", "nhid", "9")

	sock, err := nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_ROUTE, unix.RTNLGRP_NEXTHOP)
	f.must(err)
	defer sock.Close()
	dev.VNI = 2
	_, err = f.p.EnsureVXLAN(dev)
	f.must(err)

	// What the kernel said, in order, until the new device came.
	var said []string
	for done := false; !done; {
		msgs, _, err := sock.Receive()
		f.must(err)
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.RTM_DELROUTE:
				r, ok := parseRoute(m.Data, nil)
				if !ok {
					t.Fatalf("an unreadable route deletion")
				}
				said = append(said, "route "+r.Dst.String())
			case unix.RTM_DELNEXTHOP:
				said = append(said, "nexthop")
			case unix.RTM_DELLINK:
				said = append(said, "link")
			case unix.RTM_NEWLINK:
				done = done || slices.Contains(said, "link")
			}
		}
	}
	t.Log(said)
	link := slices.Index(said, "link")
	for _, want := range []string{"route 10.1.0.0/24", "route 10.2.0.0/24", "nexthop"} {
		if i := slices.Index(said, want); i < 0 || i > link {
			t.Errorf("the kernel said %q: want %s deleted before the device", said, want)
		}
	}
	if slices.Contains(said, "route 10.9.0.0/24") {
		t.Errorf("the route through ul0 was deleted: %q", said)
	}
	if out, err := exec.Command("ip", "route", "show", "10.9.0.0/24").CombinedOutput(); err != nil || !strings.Contains(string(out), "nhid 9") {
		t.Errorf("the route through ul0: %s %v; want it kept", out, err)
	}
}

// TestChangeMAC: the VXLAN device takes a new random MAC in place, up, with its routes and FDB
// entries kept; the kernel drops its neighbours (as for any change of a device's address),
// which the full Apply after it writes again. A State without a device is refused.
func TestChangeMAC(t *testing.T) {
	f := newFixture(t, testLog(t))
	st := testState(t, true)
	old, err := f.p.Prepare(t.Context(), st)
	f.must(err)
	st.Peers = backend.PeerMap{"a": {
		Subnet:   pfx("10.244.2.0/24"),
		PublicIP: ip("192.168.50.2"),
		VTEPMAC:  backend.MAC{0xaa, 0, 0, 0, 0, 2},
	}}
	f.apply(st, backend.Update{Full: true})
	index := f.link(vx).Attrs().Index
	routes, neighs, fdb := f.routes(), f.neighbors(vx), f.fdb(vx)

	mac, err := f.p.ChangeMAC(t.Context(), st)
	f.must(err)
	l := f.link(vx)
	if got := macOf(l.Attrs().HardwareAddr); got != mac || mac == old || !mac.IsUsable() || mac[0]&2 == 0 {
		t.Errorf("the device has MAC %s, ChangeMAC said %s (before: %s); want a new, usable, locally administered one", got, mac, old)
	}
	if l.Attrs().Index != index || l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("the device: index %d (was %d), flags %v; want the same device, up", l.Attrs().Index, index, l.Attrs().Flags)
	}
	checkList(t, "routes", f.routes(), routes...)
	checkList(t, "FDB", f.fdb(vx), fdb...)
	if c := f.apply(st, backend.Update{Full: true}); c.Total() != len(neighs) {
		t.Errorf("the full Apply after ChangeMAC wrote %v; want the %d neighbours the kernel dropped", c, len(neighs))
	}
	checkList(t, "neighbours", f.neighbors(vx), neighs...)
	f.converged(st, "after ChangeMAC and a full Apply")

	if _, err := f.p.ChangeMAC(t.Context(), testState(t, false)); err == nil {
		t.Error("ChangeMAC of a State without a device: no error")
	}
}
