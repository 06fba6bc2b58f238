package daemon

import (
	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/status"
)

// peersView is the families' peer sets as the loop last published them, for the readers of
// the node's state: the peers of /status and weft_peers on /metrics. The loop is the sets'
// only writer, and an Apply reads them for as long as the data plane takes (seconds at
// 20,000 peers on Linux, far longer through HNS): readers holding a lock with it would wait
// that long, and a Prometheus scrape would time out on a busy node. The loop publishes a new
// view after each change instead, never changed after, and a reader takes the last one
// without waiting for anything.
type peersView struct {
	fams []famPeers // in the order of daemon.paths: IPv4 first
}

// famPeers is one family's part of a peersView.
type famPeers struct {
	fam   backend.Family
	vni   uint32 // of the family's overlay device; 0 without one
	peers backend.Snapshot
}

// publish makes the sets as they are now the view that readers get. Only the loop calls it.
func (d *daemon) publish() {
	v := &peersView{fams: make([]famPeers, 0, len(d.paths))}
	for _, fp := range d.paths {
		v.fams = append(v.fams, fp.snapshot())
	}
	d.view.Store(v)
	d.viewStale = false
}

// peerStatus describes every peer for /status, each family's half apart, from the last view.
func (d *daemon) peerStatus() []status.Peer {
	v := d.view.Load()
	if v == nil {
		return nil
	}
	var out []status.Peer
	for _, f := range v.fams {
		for _, p := range f.peers.Peers() {
			ps := status.Peer{Key: p.Key, Subnet: p.Subnet.String(), PublicIP: p.PublicIP.String(),
				BackendType: p.BackendType, State: "programmed"}
			if f.fam == backend.IPv6 {
				ps.Family = f.fam.String()
			}
			if p.VTEPMAC != (backend.MAC{}) {
				ps.BackendData = backend.VXLANData{VNI: f.vni, VtepMAC: p.VTEPMAC}.Encode()
			}
			if p.Skipped != nil {
				ps.State, ps.Reason, ps.ClashesWith = "skipped", p.Skipped.Reason, p.Skipped.ClashesWith
			}
			out = append(out, ps)
		}
	}
	return out
}

// peerCounts counts the peer leases by backend type and state, for weft_peers when scraped,
// from the last view: by their halves of the first family (IPv4 unless the network is IPv6
// only).
func (d *daemon) peerCounts() map[[2]string]int {
	n := map[[2]string]int{}
	v := d.view.Load()
	if v == nil || len(v.fams) == 0 {
		return n
	}
	for p := range v.fams[0].peers.All() {
		state := "programmed"
		if p.Skipped != nil {
			state = "skipped"
		}
		n[[2]string{p.BackendType, state}]++
	}
	return n
}
