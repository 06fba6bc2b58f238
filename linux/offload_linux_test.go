package linux

import (
	"context"
	"testing"

	"github.com/safchain/ethtool"
)

// TestTxChecksumOffload: a VXLAN device comes with transmit checksum offload on; the Plane
// turns it off and on again, and the kernel's own account (ETHTOOL_GFEATURES, read on a
// socket of the test's own) follows each change, the segmentation offloads with it.
func TestTxChecksumOffload(t *testing.T) {
	f := newFixture(t, testLog(t))
	if _, err := f.p.EnsureVXLAN(testDevice()); err != nil {
		t.Fatal(err)
	}
	et, err := ethtool.NewEthtool()
	if err != nil {
		t.Fatal(err)
	}
	defer et.Close()
	kernel := func() bool {
		t.Helper()
		fs, err := et.Features(vx)
		if err != nil {
			t.Fatal(err)
		}
		// The segmentation offloads need the checksum's: the kernel drops them with it, as
		// for `ethtool -K tx off`, and brings them back with it.
		for _, f := range []string{"tx-tcp-segmentation", "tx-tcp6-segmentation", "tx-udp-segmentation"} {
			if fs[f] != fs["tx-checksum-ip-generic"] {
				t.Errorf("%s %t while tx-checksum-ip-generic %t", f, fs[f], fs["tx-checksum-ip-generic"])
			}
		}
		return fs["tx-checksum-ip-generic"]
	}
	if !kernel() {
		t.Fatal("a new VXLAN device has tx-checksum-ip-generic off; want the kernel's default, on")
	}
	ctx := context.Background()
	// Off, off again (no change), on.
	for _, want := range []bool{false, false, true} {
		if err := f.p.SetTxChecksumOffload(ctx, vx, want); err != nil {
			t.Fatal(err)
		}
		if got := kernel(); got != want {
			t.Fatalf("after SetTxChecksumOffload(%t) the kernel says tx-checksum-ip-generic %t", want, got)
		}
		if got, err := f.p.TxChecksumOffload(vx); err != nil || got != want {
			t.Fatalf("TxChecksumOffload = %t, %v; want %t", got, err, want)
		}
	}
	if err := f.p.SetTxChecksumOffload(ctx, "nosuchdev", false); err == nil {
		t.Error("SetTxChecksumOffload of a missing device: no error")
	}
}
