package linux

import (
	"net"
	"net/netip"

	"github.com/weftnet/weft/backend"
)

// Report is what a full Apply would change to make the kernel match a State, and how the overlay
// device differs from what EnsureVXLAN would make. Diff produces it without writing anything,
// so an operator's tool (weftctl doctor) can show the drift that weftd would repair.
type Report struct {
	Device    *DeviceReport // nil for host-gw
	Nexthops  []Change[Nexthop]
	Routes    []Change[Route]
	Neighbors []Change[Neighbor]
	FDB       []Change[FDBEntry]
	Addrs     []Change[netip.Prefix] // of the overlay device
}

// Change is one entry a full Apply would write: Want is the entry it would set and Have the
// kernel's entry it would overwrite or delete. A zero Want is a deletion, a zero Have an
// addition of something missing.
type Change[T comparable] struct {
	Want, Have T
}

// DeviceReport is the overlay device as found.
type DeviceReport struct {
	Name    string
	Missing bool
	Up      bool
	MTU     int
	MAC     backend.MAC // what the node's lease must publish as its VtepMAC
	// Incompatible says why EnsureVXLAN would replace the device (VNI, port, local address,
	// underlay, learning, GBP, not a VXLAN device); "" when it would adopt it.
	Incompatible string
}

// Converged reports whether a full Apply and EnsureVXLAN would find nothing to do.
func (r Report) Converged() bool {
	if d := r.Device; d != nil && (d.Missing || !d.Up || d.Incompatible != "") {
		return false
	}
	return len(r.Nexthops)+len(r.Routes)+len(r.Neighbors)+len(r.FDB)+len(r.Addrs) == 0
}

// Diff compares the kernel with st as a full Apply would, through the same dump and diff, and
// reports what a full Apply would write, touching only what owned allows, without writing it.
// The MTU is reported, not judged: EnsureVXLAN sets it, and the caller knows what it should be.
func (p *Plane) Diff(st *backend.State) (Report, error) {
	p.mu.Lock()
	want, owned := p.want(st)
	p.mu.Unlock()
	return p.diffWant(want, owned, st.Device)
}

// diffWant is Diff in the kernel's terms; dev is the overlay device (nil for host-gw).
func (p *Plane) diffWant(want Want, owned Ownership, dev *backend.VXLANDevice) (Report, error) {
	p.mu.Lock()
	defer p.mu.Unlock()

	name := ""
	if dev != nil {
		name = dev.Name
	}
	// Without the device only routes are read: every neighbour, FDB entry and address of st
	// then shows as missing, which is what a full Apply would write after EnsureVXLAN.
	var have kernelState
	snap, err := p.dumpKernel(name, owned.family(), false, want.peers.len(), &have)
	if err != nil {
		return Report{}, err
	}
	var r Report
	if vx := snap.vx; dev != nil {
		r.Device = &DeviceReport{Name: dev.Name, Missing: vx == nil}
		if vx != nil {
			a := vx.Attrs()
			r.Device.Up, r.Device.MTU, r.Device.MAC = a.Flags&net.FlagUp != 0, a.MTU, macOf(a.HardwareAddr)
			link, err := p.vxlanLink(*dev)
			if err != nil {
				return Report{}, err
			}
			r.Device.Incompatible = incompatible(vx, link)
		}
	}
	pl := diff(want, have, owned)

	for _, w := range pl.SetNexthops.all() {
		c := Change[Nexthop]{Want: w}
		for _, k := range have.Nexthops {
			if k.ID == w.ID {
				c.Have = k.Nexthop
			}
		}
		r.Nexthops = append(r.Nexthops, c)
	}
	for _, n := range pl.DelNexthops {
		r.Nexthops = append(r.Nexthops, Change[Nexthop]{Have: n})
	}
	for _, w := range pl.SetRoutes.all() {
		c := Change[Route]{Want: w}
		for _, k := range have.Routes {
			// The route a replace overwrites: same destination, the default metric.
			if k.Dst.Masked() == w.Dst.Masked() && k.Metric == defaultMetric(w.Dst) {
				c.Have = k.Route
			}
		}
		r.Routes = append(r.Routes, c)
	}
	for _, k := range pl.DelRoutes {
		r.Routes = append(r.Routes, Change[Route]{Have: k.Route})
	}
	for _, w := range pl.SetNeighbors.all() {
		c := Change[Neighbor]{Want: w}
		for _, k := range have.Neighbors {
			if k.Dev == w.Dev && k.IP == w.IP {
				c.Have = k.Neighbor
			}
		}
		r.Neighbors = append(r.Neighbors, c)
	}
	for _, n := range pl.DelNeighbors {
		r.Neighbors = append(r.Neighbors, Change[Neighbor]{Have: n})
	}
	for _, w := range pl.SetFDB.all() {
		c := Change[FDBEntry]{Want: w}
		for _, k := range have.FDB {
			// A replace rewrites the MAC's first destination: report that one.
			if ownsFDB(k, w.Dev) && k.MAC == w.MAC {
				c.Have = k.FDBEntry
				break
			}
		}
		r.FDB = append(r.FDB, c)
	}
	for _, f := range pl.DelFDB {
		r.FDB = append(r.FDB, Change[FDBEntry]{Have: f})
	}
	for _, a := range pl.AddAddrs {
		r.Addrs = append(r.Addrs, Change[netip.Prefix]{Want: a})
	}
	for _, a := range pl.DelAddrs {
		r.Addrs = append(r.Addrs, Change[netip.Prefix]{Have: a})
	}
	return r, nil
}
