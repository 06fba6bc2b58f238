package linux

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

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
		p.model.reset(st, p.nexthops, p.blackhole)
		w, own := p.want(st)
		c, err := p.reconcile(w, own)
		ch := c.counts()
		if err == nil && st.Masquerade {
			var changed bool
			changed, err = p.masquerade(st)
			if changed {
				ch["masquerade"]++
			}
		}
		// The forward rules whatever the routes' outcome: they are not the routes', and a
		// node whose host drops forwarded traffic needs them for every peer that works.
		changed, ferr := p.forward(st)
		if changed {
			ch["forward"]++
		}
		return ch, errors.Join(err, ferr)
	}
	return p.applyPeers(u.Peers)
}

// nft is weft's nftables table's manager, made on first use.
func (p *Plane) nft() (*masq.Manager, error) {
	if p.masq == nil && !p.ns.IsOpen() { // the process's own namespace: no setns (thisNetns)
		p.masq = masq.New(p.log, nil)
	}
	if p.masq == nil {
		m, err := masq.NewInNetNS(p.log, int(p.ns))
		if err != nil {
			return nil, err
		}
		p.masq = m
	}
	return p.masq, nil
}

// forward makes weft's forward chain of the State's family accept the pod network's
// forwarded traffic, or removes it when the plane is not to (SetForwardRules).
func (p *Plane) forward(st *backend.State) (bool, error) {
	m, err := p.nft()
	if err != nil {
		return false, err
	}
	var n netip.Prefix
	if p.forwardAccept {
		n = st.Network()
	}
	changed, err := m.EnsureForward(n, st.Family == backend.IPv6)
	switch {
	case err == nil:
		return changed, nil
	case !p.forwardAccept:
		// Only a chain left by an earlier run could be removed; a host without nftables
		// has none, and must not fail every full Apply for it.
		p.log.Warn("could not check for a forward chain to remove", "err", err)
		return false, nil
	}
	return false, fmt.Errorf("forward rules: %w", err)
}

// masquerade makes the nftables rules that masquerade pod traffic of the State's family
// leaving the network; the other family's are the other family's plane's.
func (p *Plane) masquerade(st *backend.State) (bool, error) {
	m, err := p.nft()
	if err != nil {
		return false, err
	}
	r, v6 := masq.Rules{Network: st.Network(), Subnet: st.Own}, st.Family == backend.IPv6
	if v6 {
		r = masq.Rules{IPv6Network: st.Network(), IPv6Subnet: st.Own}
	}
	r.NotFullyRandom = p.notFullyRandom
	changed, err := m.EnsureFamily(r, v6)
	if err != nil {
		return false, fmt.Errorf("masquerade: %w", err)
	}
	return changed, nil
}

// counts renders Changes as the backend counts them.
func (c Changes) counts() backend.Changes {
	return backend.Changes{
		"nexthop":  c.NexthopsAdded + c.NexthopsRemoved,
		"route":    c.RoutesAdded + c.RoutesRemoved,
		"neighbor": c.NeighborsAdded + c.NeighborsRemoved,
		"fdb":      c.FDBAdded + c.FDBRemoved,
		"address":  c.AddrsAdded + c.AddrsRemoved,
	}
}

// applyPeers writes the entries of changed peers: the new ones first (FDB, neighbour, then
// the nexthop and route that rely on them), then the deletion of what the old ones had and
// the new ones do not, so that a changed peer is never unreachable in between. Every phase
// is one batch.
func (p *Plane) applyPeers(changes []backend.PeerChange) (backend.Changes, error) {
	m := &p.model
	for _, pc := range changes {
		m.forget(pc.Old)
		m.learn(pc.New)
	}
	l, dev := m.layout(), m.deviceIndex()
	var c Changes
	var errs []error
	var b batch
	type pair struct{ old, new peerEntries }
	pairs := make([]pair, len(changes))
	// What the new peers use, so that no deletion of an old peer's entry takes away one
	// that a new peer (of this key or another) has just written in its place.
	var kept struct {
		routes map[netip.Prefix]bool
		nhs    map[uint32]bool
		neighs map[netip.Addr]bool
		macs   map[backend.MAC]bool
	}
	kept.routes, kept.nhs, kept.neighs, kept.macs = map[netip.Prefix]bool{}, map[uint32]bool{}, map[netip.Addr]bool{}, map[backend.MAC]bool{}
	for i, pc := range changes {
		if pc.Old.IsValid() {
			pairs[i].old = l.entriesOf(pc.Old)
		}
		if pc.New.IsValid() {
			e := l.entriesOf(pc.New)
			pairs[i].new = e
			kept.routes[e.route.Dst] = true
			if e.nh != nil {
				kept.nhs[e.nh.ID] = true
			}
			if e.neigh != nil {
				kept.neighs[e.neigh.IP], kept.macs[e.fdb.MAC] = true, true
			}
		}
	}
	link := func(name, what string) (int, bool) {
		i, err := m.index(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
		return i, err == nil
	}
	for i, pc := range changes {
		old, new := pairs[i].old, pairs[i].new
		if !pc.New.IsValid() {
			continue
		}
		if f := new.fdb; f != nil && (old.fdb == nil || *old.fdb != *f) {
			b.add(fdbSet(*f, dev), &c.FDBAdded, false, fmt.Sprintf("setting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
		}
		if n := new.neigh; n != nil && (old.neigh == nil || *old.neigh != *n) {
			b.add(neighSet(*n, dev), &c.NeighborsAdded, false, fmt.Sprintf("setting neighbour %s lladdr %s dev %s", n.IP, n.MAC, n.Dev))
		}
	}
	p.flush(&b, &errs)
	for i, pc := range changes {
		old, new := pairs[i].old, pairs[i].new
		if n := new.nh; pc.New.IsValid() && n != nil && (old.nh == nil || *old.nh != *n) {
			what := "replacing nexthop " + n.String()
			if link, ok := link(n.Dev, what); ok {
				b.add(nexthopSet(*n, link), &c.NexthopsAdded, false, what)
			}
		}
	}
	p.flush(&b, &errs)
	for i, pc := range changes {
		old, new := pairs[i].old, pairs[i].new
		if r := new.route; pc.New.IsValid() && (!pc.Old.IsValid() || old.route != r) {
			what := "replacing route " + routeString(r)
			if link, ok := link(r.Dev, what); ok || r.NH != 0 {
				b.add(routeSet(r, link), &c.RoutesAdded, false, what)
			}
		}
	}
	p.flush(&b, &errs)
	for i, pc := range changes {
		old := pairs[i].old
		if r := old.route; pc.Old.IsValid() && !kept.routes[r.Dst] {
			what := "deleting route " + routeString(r)
			if link, ok := link(r.Dev, what); ok || r.NH != 0 {
				b.add(routeDelOwn(r, link), &c.RoutesRemoved, true, what)
			}
		}
	}
	p.flush(&b, &errs)
	for i, pc := range changes {
		old := pairs[i].old
		if !pc.Old.IsValid() {
			continue
		}
		if n := old.nh; n != nil && !kept.nhs[n.ID] {
			b.add(nexthopDel(n.ID), &c.NexthopsRemoved, true, "deleting nexthop "+n.String())
		}
		if n := old.neigh; n != nil && !kept.neighs[n.IP] {
			b.add(neighDel(n.IP, dev), &c.NeighborsRemoved, true, fmt.Sprintf("deleting neighbour %s dev %s", n.IP, n.Dev))
		}
		if f := old.fdb; f != nil && !kept.macs[f.MAC] {
			b.add(fdbDel(*f, dev), &c.FDBRemoved, true, fmt.Sprintf("deleting FDB entry %s dst %s dev %s", f.MAC, f.Dst, f.Dev))
		}
	}
	p.flush(&b, &errs)
	return c.counts(), errors.Join(errs...)
}
