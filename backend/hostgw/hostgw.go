// Package hostgw is the host-gw backend: a plain route to every peer's subnet via the peer's
// public IP on the external interface. It needs the nodes to share a layer-2 network, so
// peers whose public IP is not on a directly connected network are skipped.
package hostgw

import (
	"fmt"

	"net/netip"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

// Type is the backend type published in leases.
const Type = subnet.BackendHostGW

// Node is what the backend knows of the node it runs on.
type Node struct {
	Config    *subnet.Config
	Underlay  string         // the external interface
	Connected []netip.Prefix // networks directly attached to it
}

// Desired is the data plane a node holding own needs to reach peers.
func Desired(n Node, own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped) {
	var st backend.State
	sel := backend.SelectPeers(n.Config, Type, own, peers)
	skipped := sel.Skipped
	for _, l := range sel.Usable {
		if !backend.OnLink(n.Connected, l.Attrs.PublicIP) {
			skipped = append(skipped, backend.Skipped{Key: l.Key(), Code: backend.SkipNotOnLink,
				Reason: fmt.Sprintf("public IP %s is not on a network of %s: host-gw needs the nodes on one layer-2 network", l.Attrs.PublicIP, n.Underlay)})
			continue
		}
		st.Routes = append(st.Routes, backend.Route{Dst: l.Subnet, Gw: l.Attrs.PublicIP, Dev: n.Underlay})
	}
	st.Sort()
	return st, skipped
}
