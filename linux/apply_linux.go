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
				ch[changeMasquerade]++
			}
		}
		// The forward rules whatever the routes' outcome: they are not the routes', and a
		// node whose host drops forwarded traffic needs them for every peer that works.
		changed, ferr := p.forward(st)
		if changed {
			ch[changeForward]++
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

// applyPeers writes the entries of changed peers, with no dump: the model learns the
// changes and gives the plan from what it programmed to what it programs now, which the one
// writer executes.
func (p *Plane) applyPeers(changes []backend.PeerChange) (backend.Changes, error) {
	pl := p.model.change(changes)
	c, err := p.write(&pl, nil)
	return c.counts(), err
}
