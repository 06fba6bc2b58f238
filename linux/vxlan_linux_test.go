package linux

import (
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

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
