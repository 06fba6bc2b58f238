package windows

import (
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
)

// FuzzDiffRemoteSubnetRoutes feeds the diff of RemoteSubnetRoute policies whatever HNS might
// report of the overlay network's policies (other software's, malformed ones, duplicates,
// MACs and prefixes written every way): it never panics, removes only policies it reported
// and that are weft's (RemoteSubnetRoutes inside the cluster network, outside the node's own
// subnet), and what stays plus what it adds is exactly one matching policy per peer.
func FuzzDiffRemoteSubnetRoutes(f *testing.F) {
	f.Add(`[{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.0.2.12","DistributedRouterMacAddress":"0e-00-00-00-00-02"}}]`)
	f.Add(`[{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.0.2.99","DistributedRouterMacAddress":"0E:00:00:00:00:02"}},` +
		`{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.2.0/24","IsolationId":4096,"ProviderAddress":"192.0.2.12","DistributedRouterMacAddress":"0e:00:00:00:00:02"}}]`)
	f.Add(`[{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.1.0/24"}},{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"172.16.0.0/16"}},` +
		`{"Type":"ProviderAddress","Settings":{"ProviderAddress":"192.0.2.11"}},{"Type":"RemoteSubnetRoute","Settings":"junk"},{"Type":"RemoteSubnetRoute"}]`)
	f.Add(`[{"Type":"RemoteSubnetRoute","Settings":{"DestinationPrefix":"10.244.3.0/24","IsolationId":4096,"ProviderAddress":"192.0.2.13","DistributedRouterMacAddress":"0e:00:00:00:00:03"}}]`)
	peers := []backend.Peer{peer("10.244.2.0/24", "192.0.2.12", "0e:00:00:00:00:02"), peer("10.244.4.0/24", "192.0.2.14", "0e:00:00:00:00:04")}
	const vni = 4096
	f.Fuzz(func(t *testing.T, reported string) {
		var have []Policy
		if json.Unmarshal([]byte(reported), &have) != nil {
			return
		}
		plan := diffRemoteSubnetRoutes(peers, vni, have, owned)
		kept := map[int]bool{} // indexes into have
		for _, pol := range plan.Keep {
			i := indexOf(have, pol, kept)
			if i < 0 {
				t.Fatalf("kept %+v, which HNS did not report", pol)
			}
			kept[i] = true
		}
		removed := map[int]bool{}
		for _, pol := range plan.Remove {
			i := indexOf(have, pol, removed)
			if i < 0 || kept[i] {
				t.Fatalf("removes %+v, which HNS did not report or which is also kept", pol)
			}
			removed[i] = true
			var s RemoteSubnetRouteSettings
			if pol.Type != PolicyRemoteSubnetRoute || pol.Decode(&s) != nil {
				t.Fatalf("removes %+v, which is no RemoteSubnetRoute of weft's", pol)
			}
			if dst, err := netip.ParsePrefix(s.DestinationPrefix); err != nil || !owned.ours(dst) {
				t.Fatalf("removes %+v, whose destination is not weft's", pol)
			}
		}
		// After the plan: the reported policies not removed, and those added. Each peer
		// has exactly one of weft's, and it is the wanted one.
		var after []Policy
		for i, pol := range have {
			if !removed[i] {
				after = append(after, pol)
			}
		}
		for _, e := range plan.Add {
			after = append(after, e.Policy)
		}
		for _, p := range peers {
			n := 0
			for _, pol := range after {
				var s RemoteSubnetRouteSettings
				if pol.Type != PolicyRemoteSubnetRoute || pol.Decode(&s) != nil {
					continue
				}
				if dst, err := netip.ParsePrefix(s.DestinationPrefix); err == nil && dst == p.Subnet {
					n++
					if !sameRSR(s, rsrSettings(p, vni)) {
						t.Fatalf("peer %s: after the plan %+v, want %+v", p.Subnet, s, rsrSettings(p, vni))
					}
				}
			}
			if n != 1 {
				t.Fatalf("peer %s: %d RemoteSubnetRoutes after the plan, want 1 (reported %s)", p.Subnet, n, reported)
			}
		}
	})
}

// indexOf finds pol among the reported policies, not counting those already taken.
func indexOf(have []Policy, pol Policy, taken map[int]bool) int {
	for i, h := range have {
		if !taken[i] && h.Type == pol.Type && string(h.Settings) == string(pol.Settings) {
			return i
		}
	}
	return -1
}
