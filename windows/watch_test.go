package windows_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
)

// TestWatchHNSRestart: HNS stopping says nothing; HNS back from a restart, without the
// non-persistent network, is drift, and so is the network deleted by someone else. The
// daemon's repair (a full Apply, which finds the network missing, then Prepare) brings the
// network and the peers back.
func TestWatchHNSRestart(t *testing.T) {
	var n *winNode
	// The fake clock's time, with a moment of real time so that Watch does not spin.
	sleep := func(ctx context.Context, d time.Duration) error {
		if err := n.clock.Sleep(ctx, d); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Millisecond):
			return nil
		}
	}
	n = newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, windows.Config{Sleep: sleep})
	n.mustAcquire("10.244.1.0/24")
	peers := []subnet.Lease{
		vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44"),
		vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "00:15:5d:c0:00:09"),
	}
	n.mustConverge(peers)

	drift := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- n.plane.Watch(ctx, func() {
			select {
			case drift <- struct{}{}:
			default:
			}
		})
	}()
	quiet := func(what string) {
		t.Helper()
		select {
		case <-drift:
			t.Fatalf("%s: drift reported", what)
		case <-time.After(50 * time.Millisecond):
		}
	}
	reported := func(what string) {
		t.Helper()
		select {
		case <-drift:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no drift reported", what)
		}
	}
	quiet("all well")
	n.hns.Stop()
	quiet("HNS stopped")
	n.hns.Start()
	reported("HNS back without the network")

	// The repair: the full Apply finds the network gone, Prepare makes it again.
	_, err := n.full(peers)
	var missing *backend.MissingDeviceError
	if !errors.As(err, &missing) {
		t.Fatalf("full Apply after the restart: %v, want a MissingDeviceError", err)
	}
	n.mustAcquire("10.244.1.0/24")
	if _, err := n.full(peers); err != nil {
		t.Fatalf("full Apply after Prepare: %v", err)
	}
	if got := len(n.network("flannel.4096").PoliciesOf(windows.PolicyRemoteSubnetRoute)); got != len(peers) {
		t.Errorf("%d RemoteSubnetRoute policies after the repair, want %d", got, len(peers))
	}
	// Watch looked every millisecond while the network was gone: a report from before the
	// repair may still wait in the channel, or come from a look in flight. Those go first;
	// then nothing may be reported.
	for end := time.After(20 * time.Millisecond); ; {
		select {
		case <-drift:
			continue
		case <-end:
		}
		break
	}
	quiet("repaired")

	if err := n.hns.DeleteNetwork(n.network("flannel.4096").ID); err != nil {
		t.Fatal(err)
	}
	reported("network deleted")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Watch ended with %v", err)
	}
}
