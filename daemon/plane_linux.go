package daemon

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/linux/masq"
)

// linuxPlane is the netlink data plane plus nftables masquerade.
type linuxPlane struct {
	*linux.Plane
	masq *masq.Manager
	log  *slog.Logger
}

func newPlane(log *slog.Logger) (Plane, error) {
	p, err := linux.New(log)
	if err != nil {
		return nil, err
	}
	return &linuxPlane{Plane: p, log: log}, nil
}

func (p *linuxPlane) Reconcile(st backend.State, owned backend.Ownership) (backend.Changes, error) {
	ch, err := p.Plane.Reconcile(st, owned)
	return backend.Changes{
		"route":    ch.RoutesAdded + ch.RoutesRemoved,
		"neighbor": ch.NeighborsAdded + ch.NeighborsRemoved,
		"fdb":      ch.FDBAdded + ch.FDBRemoved,
		"address":  ch.AddrsAdded + ch.AddrsRemoved,
	}, err
}

func (p *linuxPlane) Masquerade(network, own netip.Prefix) (bool, error) {
	if p.masq == nil {
		p.masq = masq.New(p.log, nil)
	}
	changed, err := p.masq.Ensure(masq.Rules{Network: network, Subnet: own})
	if err != nil {
		return false, fmt.Errorf("masquerade: %w", err)
	}
	return changed, nil
}

func defaultRouteInterface() (string, error) { return linux.DefaultRouteInterface() }
