package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/subnet"
)

// familyPath is one IP family's data path: the family's backend and data plane, the peer set
// of the family's halves of the leases (backend.Set), what is pending for the plane, and what
// watches the path through the plane (the probes, the overlay device's transmit checksum
// offload). The loop drives it and alone calls its methods, but for those that say readers
// may call them: it tells it of lease events (Observe) and of the node's own lease
// (OwnChanged), of drift and the periodic resync (Drifted, Resync), and applies what is
// pending (Apply) while it is Busy. Those calls, named with a capital, are the loop's API; the
// others serve the probes and the readers. The path knows nothing of the daemon: what the
// node counts over every family it hears through pathHooks.
type familyPath struct {
	b     *backend.Backend
	plane backend.Plane
	cfg   pathConfig

	set     *backend.Set   // made by Start, once the own lease is known
	pending backend.Result // peer changes not yet applied
	// full: the next Apply is a full one (start, resync, drift, a failed Apply, a move of the
	// family's own subnet).
	full    bool
	drifted atomic.Bool // the plane reported drift; Drifted makes the next Apply full

	macChanged time.Time // when HealMAC last gave the device a new MAC

	prober *probe.Prober // probes the peers through the plane; nil when probes are off
	// transport checks TCP and UDP to the overlay peers; nil when probes are off or the
	// family has no overlay device to switch the offload of (off).
	transport *probe.Transport
	off       *offload
}

// pathConfig is what a familyPath is given beside its backend and plane.
type pathConfig struct {
	log     *slog.Logger
	m       *metrics
	events  Events
	hooks   pathHooks
	masq    bool   // --ip-masq
	offload string // --vxlan-tx-checksum-offload
	mtu     int    // the pods' MTU: the smallest the families' backends allow
}

// pathHooks tell the node what a family's probes found, so that it counts over every family;
// they are called from the probes' goroutines. Each may be nil.
type pathHooks struct {
	// unreachable: a peer became unreachable (example names it) or answers again (nil).
	unreachable func(example []string)
	// transport: the peers whose transport is broken may have changed.
	transport func()
	// pathMTU: the peers whose path is short of the pods' MTU may have changed.
	pathMTU func()
}

// families are the node's family paths, IPv4 first: what /status, /readyz and the gauges
// say over all of them. Readers may call their methods that say so: each asks the probes,
// which lock.
type families []*familyPath

func newFamilyPath(b *backend.Backend, plane backend.Plane, cfg pathConfig) *familyPath {
	return &familyPath{b: b, plane: plane, cfg: cfg}
}

func (fp *familyPath) fam() backend.Family { return fp.b.Family() }

// Held is the subnets the family's device serves already (backend.SubnetKeeper): invalid
// ones where the plane keeps none.
func (fp *familyPath) Held() (sn, sn6 netip.Prefix) {
	k, ok := fp.plane.(backend.SubnetKeeper)
	if !ok {
		return netip.Prefix{}, netip.Prefix{}
	}
	return k.Held(fp.b.StateFor(subnet.Lease{}, fp.cfg.masq))
}

// Prepare makes (or adopts) the family's device for the subnets an acquisition picked, asking
// for the VTEP MAC held publishes, and returns the MAC to publish.
func (fp *familyPath) Prepare(ctx context.Context, sn, sn6 netip.Prefix, held subnet.LeaseAttrs) (backend.MAC, error) {
	// A device made again (deleted while weftd was down) keeps the MAC the peers know.
	st := withPublishedMAC(fp.b.StateFor(subnet.Lease{Subnet: sn, IPv6Subnet: sn6}, fp.cfg.masq), held)
	mac, err := fp.plane.Prepare(ctx, st)
	if err != nil {
		return backend.MAC{}, fmt.Errorf("data plane (%s): %w", fp.fam(), err)
	}
	return mac, nil
}

// AddAttrs adds the family's half of the node's lease attributes, with the VTEP MAC of its
// device.
func (fp *familyPath) AddAttrs(a *subnet.LeaseAttrs, mac backend.MAC) { fp.b.AddAttrs(a, mac) }

// WireGuard is the family's WireGuard device and what runs it; nil where the family has none
// or the plane does not run WireGuard.
func (fp *familyPath) WireGuard() (*backend.WireGuardDevice, backend.WireGuardRunner) {
	dev := fp.b.StateFor(subnet.Lease{}, false).WireGuard
	r, ok := fp.plane.(backend.WireGuardRunner)
	if dev == nil || !ok {
		return nil, nil
	}
	return dev, r
}

// Start begins the path with the node's lease: an empty peer set weighed against own, a
// full Apply to come, the device's offload set up.
func (fp *familyPath) Start(ctx context.Context, own subnet.Lease) {
	fp.set = backend.NewSet(fp.b, own, fp.cfg.masq)
	fp.full = true
	fp.off = newOffload(fp.set.State().Device, fp.plane)
	fp.setUpOffload(ctx)
}

// Observe folds a batch of lease events into the peer set (the own lease's are ignored: see
// OwnChanged) and returns the leases newly skipped, which the caller reads before the next
// call.
func (fp *familyPath) Observe(batch []subnet.Event) []backend.Skipped {
	n := len(fp.pending.Skipped)
	// Only the next Apply resets full: until then, changes would be recorded for nothing.
	fp.pending.Full = fp.full
	for _, ev := range batch {
		k := ev.LeaseKey()
		switch ev.Type {
		case subnet.EventAdded:
			fp.set.PutKeyed(k, ev.Lease, &fp.pending)
		case subnet.EventRemoved:
			fp.set.Remove(k, &fp.pending)
		}
	}
	return fp.pending.Skipped[n:]
}

// OwnChanged tells the path the node's own lease changed (a renewal that moved it, a VTEP
// MAC published anew, a lease made again): every peer is weighed against it again. A move of
// the node's subnet of either family, which the plane's device and routes are built on (the
// other family's: a dual-stack Windows host-gw network carries both) and which no peer
// change carries, makes the next Apply full. It returns the leases newly skipped, as Observe
// does.
func (fp *familyPath) OwnChanged(own subnet.Lease) []backend.Skipped {
	before := *fp.set.State()
	n := len(fp.pending.Skipped)
	fp.pending.Full = fp.full
	fp.set.SetOwn(own, &fp.pending)
	if st := fp.set.State(); st.Own != before.Own || st.Sibling != before.Sibling {
		fp.full, fp.pending.Full = true, true
	}
	return fp.pending.Skipped[n:]
}

// Contesting is how many older peer leases claim what the own lease claims in the family.
func (fp *familyPath) Contesting() int { return fp.set.Contesting() }

// Watch watches the plane for drift until ctx is done, calling wake (from its goroutine)
// after each report; the loop then calls Drifted.
func (fp *familyPath) Watch(ctx context.Context, wake func()) error {
	return fp.plane.Watch(ctx, func() {
		fp.drifted.Store(true)
		wake()
	})
}

// Drifted makes the next Apply full if the plane reported drift since it was last called.
func (fp *familyPath) Drifted() {
	if fp.drifted.Swap(false) {
		fp.full = true
	}
}

// Resync makes the next Apply full: the system is dumped and diffed whatever is pending.
func (fp *familyPath) Resync() { fp.full = true }

// Busy reports whether the path has something to apply.
func (fp *familyPath) Busy() bool { return fp.full || len(fp.pending.Changes) > 0 }

// Full reports whether the next Apply is a full one.
func (fp *familyPath) Full() bool { return fp.full }

// Peers is how many peers the family programs.
func (fp *familyPath) Peers() int { return fp.set.State().Peers.Len() }

// Apply applies what is pending: the changed peers only, or everything (dump and diff) when
// full. A failure makes the next one full; one that finds the overlay device gone returns a
// *backend.MissingDeviceError, and Remake brings the device back.
func (fp *familyPath) Apply(ctx context.Context) (backend.Changes, error) {
	u := backend.Update{Full: fp.full}
	if !u.Full {
		u.Peers = fp.pending.Changes
	}
	fp.pending = backend.Result{}
	changes, err := fp.plane.Apply(ctx, fp.set.State(), u)
	fp.probeApplied(u)
	fp.full = err != nil
	if changes.Total() > 0 {
		fp.cfg.log.Debug("family converged", "family", fp.fam(), "changes", changes.String(), "full", u.Full)
	}
	return changes, err
}

// macChangeGap is the least time between two new VTEP MACs of a family (HealMAC): a writer
// that copied each new MAC into an older lease would cost a change a minute, not a storm.
const macChangeGap = time.Minute

// HealMAC gives the family's overlay device a new VTEP MAC when a peer lease that comes
// first (older) claims the one the node publishes (backend.Set.MACContested), where the plane
// can (ChangesMAC), at most once in macChangeGap; it returns the MAC, which the caller
// publishes, and whether it changed it. The next Apply is full (backend.MACChanger). Every
// node programs the other lease and skips this node's meanwhile: the node is cut off from its
// peers until it has another MAC.
func (fp *familyPath) HealMAC(ctx context.Context, now time.Time) (backend.MAC, bool, error) {
	if !fp.ChangesMAC() || fp.set == nil || !fp.set.MACContested() || now.Sub(fp.macChanged) < macChangeGap {
		return backend.MAC{}, false, nil
	}
	fp.macChanged = now
	fp.full = true // whatever the outcome: the system may have dropped entries of the device
	mac, err := fp.plane.(backend.MACChanger).ChangeMAC(ctx, fp.set.State())
	if err != nil {
		return backend.MAC{}, false, fmt.Errorf("data plane (%s): %w", fp.fam(), err)
	}
	return mac, true, nil
}

// ChangesMAC reports whether the family's plane can give its device a new VTEP MAC (HealMAC).
func (fp *familyPath) ChangesMAC() bool {
	_, ok := fp.plane.(backend.MACChanger)
	return ok
}

// Remake makes the family's overlay device again after Apply found it gone, with the VTEP MAC
// that published says, and its offload as it was; it returns the device's MAC, which the
// caller publishes should it differ. The next Apply is full.
func (fp *familyPath) Remake(ctx context.Context, published subnet.LeaseAttrs) (backend.MAC, error) {
	fp.full = true
	mac, err := fp.plane.Prepare(ctx, withPublishedMAC(fp.set.State(), published))
	if err != nil {
		return backend.MAC{}, fmt.Errorf("data plane: %w", err)
	}
	fp.setUpOffload(ctx)
	return mac, nil
}

// snapshot is the family's peers as they are now, for a view that readers take.
func (fp *familyPath) snapshot() famPeers {
	f := famPeers{fam: fp.fam(), peers: fp.set.Snapshot()}
	if dev := fp.set.State().Device; dev != nil {
		f.vni = dev.VNI
	}
	return f
}

// withPublishedMAC is st with its VXLAN device asking for the VTEP MAC that attrs publish for
// st's family, so that a device made again is the one the peers were told of; st itself
// where attrs publish none. st is not changed: a Set's State is what every later Apply reads.
func withPublishedMAC(st *backend.State, attrs subnet.LeaseAttrs) *backend.State {
	if st.Device == nil {
		return st
	}
	data := attrs.BackendData
	if st.Family == backend.IPv6 {
		data = attrs.BackendV6Data
	}
	vx, err := backend.DecodeVXLANData(data)
	if err != nil || vx.VNI != st.Device.VNI {
		return st
	}
	s, dev := *st, *st.Device
	dev.MAC = vx.VtepMAC
	s.Device = &dev
	return &s
}
