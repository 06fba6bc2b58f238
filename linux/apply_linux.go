package linux

import (
	"context"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux/masq"
)

var _ backend.Plane = (*Plane)(nil)

// Prepare creates or adopts the State's VXLAN device (see EnsureVXLAN) and returns its MAC;
// host-gw has no device.
func (p *Plane) Prepare(ctx context.Context, st *backend.State) (backend.MAC, error) {
	if st.Device == nil {
		return backend.MAC{}, nil
	}
	if err := ctx.Err(); err != nil {
		return backend.MAC{}, err
	}
	return p.EnsureVXLAN(*st.Device)
}

// Apply makes the kernel match st. A full update dumps routes, neighbours, FDB entries and
// the device's addresses and writes the difference (and the masquerade rules); otherwise only
// the changed peers' entries are written, with no dump: cost grows with the change, not with
// the cluster. Either way the model of what the plane programmed becomes st, before anything
// is written, so that Watch can tell the kernel's echo of these writes from drift.
func (p *Plane) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if u.Full || !p.model.fits(st) {
		p.model.reset(st)
		w, own := WantOf(st)
		c, err := p.reconcile(w, own)
		ch := c.counts()
		if err == nil && st.Masquerade {
			var changed bool
			changed, err = p.masquerade(st)
			if changed {
				ch["masquerade"]++
			}
		}
		return ch, err
	}
	return p.applyPeers(u.Peers)
}

// masquerade makes the nftables rules that masquerade pod traffic leaving the network.
func (p *Plane) masquerade(st *backend.State) (bool, error) {
	if p.masq == nil {
		m, err := masq.NewInNetNS(p.log, int(p.ns))
		if err != nil {
			return false, err
		}
		p.masq = m
	}
	changed, err := p.masq.Ensure(masq.Rules{Network: st.Network(), Subnet: st.Own})
	if err != nil {
		return false, fmt.Errorf("masquerade: %w", err)
	}
	return changed, nil
}

// counts renders Changes as the backend counts them.
func (c Changes) counts() backend.Changes {
	return backend.Changes{
		"route":    c.RoutesAdded + c.RoutesRemoved,
		"neighbor": c.NeighborsAdded + c.NeighborsRemoved,
		"fdb":      c.FDBAdded + c.FDBRemoved,
		"address":  c.AddrsAdded + c.AddrsRemoved,
	}
}

// applyPeers writes the entries of changed peers: the new ones first (FDB, neighbour, then
// the route that relies on them), then the deletion of what the old ones had and the new ones
// do not, so that a changed peer is never unreachable in between.
func (p *Plane) applyPeers(changes []backend.PeerChange) (backend.Changes, error) {
	m := &p.model
	var c Changes
	var errs []error
	note := func(counter *int, n int, err error, what string) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return
		}
		*counter += n
	}
	for _, pc := range changes {
		m.forget(pc.Old)
		m.learn(pc.New)
	}
	for _, pc := range changes {
		var old, new peerEntries
		if pc.Old.IsValid() {
			old = entriesOf(pc.Old, m.dev, m.underlay)
		}
		if pc.New.IsValid() {
			new = entriesOf(pc.New, m.dev, m.underlay)
			if f := new.fdb; f != nil && (old.fdb == nil || *old.fdb != *f) {
				note(&c.FDBAdded, 1, p.h.NeighSet(fdbNeigh(*f, m.devIndex)),
					fmt.Sprintf("setting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
			}
			if n := new.neigh; n != nil && (old.neigh == nil || *old.neigh != *n) {
				note(&c.NeighborsAdded, 1, p.h.NeighSet(ipNeigh(*n, m.devIndex)),
					fmt.Sprintf("setting neighbour %s lladdr %s dev %s", n.IP, n.MAC, n.Dev))
			}
			if r := new.route; !pc.Old.IsValid() || old.route != r {
				note(&c.RoutesAdded, 1, p.replaceRoute(r), "replacing route "+routeString(r))
			}
		}
		if !pc.Old.IsValid() {
			continue
		}
		if r := old.route; !pc.New.IsValid() || new.route.Dst != r.Dst {
			gone, err := deleted(p.deleteRoute(r))
			note(&c.RoutesRemoved, gone, err, "deleting route "+routeString(r))
		}
		if n := old.neigh; n != nil && (new.neigh == nil || new.neigh.IP != n.IP) {
			gone, err := deleted(p.h.NeighDel(&netlink.Neigh{LinkIndex: m.devIndex, Family: familyOf(n.IP), IP: n.IP.AsSlice()}))
			note(&c.NeighborsRemoved, gone, err, fmt.Sprintf("deleting neighbour %s dev %s", n.IP, n.Dev))
		}
		if f := old.fdb; f != nil && (new.fdb == nil || new.fdb.MAC != f.MAC) {
			gone, err := deleted(p.h.NeighDel(fdbNeigh(*f, m.devIndex)))
			note(&c.FDBRemoved, gone, err, fmt.Sprintf("deleting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
		}
	}
	return c.counts(), errors.Join(errs...)
}

// replaceRoute writes r with replace semantics, so that a changed route never disappears.
func (p *Plane) replaceRoute(r Route) error {
	link, err := p.model.index(r.Dev)
	if err != nil {
		return err
	}
	return p.h.RouteReplace(toRoute(r, link))
}

// deleteRoute deletes the route weft programmed as r (default metric, main table).
func (p *Plane) deleteRoute(r Route) error {
	link, err := p.model.index(r.Dev)
	if err != nil {
		return err
	}
	return p.h.RouteDel(toRoute(r, link))
}
