package hostgw

import (
	"net/netip"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

func TestDesired(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`))
	if err != nil {
		t.Fatal(err)
	}
	n := Node{Config: cfg, Underlay: "eth0", Connected: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	l := func(sn, ip string) subnet.Lease {
		return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr(ip), BackendType: Type}}
	}
	own := l("10.244.1.0/24", "192.0.2.10")
	far := l("10.244.3.0/24", "198.51.100.3") // not on the same layer-2 network
	st, skipped := Desired(n, own, []subnet.Lease{own, l("10.244.2.0/24", "192.0.2.12"), far})
	want := []backend.Route{{Dst: netip.MustParsePrefix("10.244.2.0/24"), Gw: netip.MustParseAddr("192.0.2.12"), Dev: "eth0"}}
	if len(st.Routes) != 1 || st.Routes[0] != want[0] || st.VXLAN != nil || len(st.FDB)+len(st.Neighbors) != 0 {
		t.Errorf("state %+v", st)
	}
	if len(skipped) != 1 || skipped[0].Key != far.Key() {
		t.Errorf("skipped %v", skipped)
	}
}
