package vxlan

import (
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
)

func lease(sn, ip, data string) subnet.Lease {
	l := subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{BackendType: Type, BackendData: json.RawMessage(data)}}
	l.Attrs.PublicIP, _ = netip.ParseAddr(ip)
	return l
}

func node(t *testing.T, conf string) Node {
	cfg, err := subnet.ParseConfig([]byte(conf))
	if err != nil {
		t.Fatal(err)
	}
	return Node{Config: cfg, VNI: cfg.Backend.VNIFor("linux"), Local: netip.MustParseAddr("192.0.2.10"),
		Underlay: "eth0", UnderlayMTU: 1500, Connected: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
}

func TestDesired(t *testing.T) {
	n := node(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}`)
	peers := []subnet.Lease{
		own,
		lease("10.244.3.0/24", "198.51.100.3", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:03"}`),
		lease("10.244.2.0/24", "192.0.2.12", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`),
	}
	st, skipped := Desired(n, own, peers)
	if len(skipped) != 0 {
		t.Errorf("skipped %v", skipped)
	}
	dev := "flannel.1"
	want := backend.State{
		VXLAN: &backend.VXLANDevice{Name: dev, VNI: 1, Local: n.Local, Underlay: "eth0", MTU: 1450,
			Addresses: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/32")}},
		Routes: []backend.Route{
			{Dst: netip.MustParsePrefix("10.244.2.0/24"), Gw: netip.MustParseAddr("10.244.2.0"), Dev: dev, Onlink: true},
			{Dst: netip.MustParsePrefix("10.244.3.0/24"), Gw: netip.MustParseAddr("10.244.3.0"), Dev: dev, Onlink: true},
		},
		Neighbors: []backend.Neighbor{
			{IP: netip.MustParseAddr("10.244.2.0"), MAC: backend.MAC{0x0e, 0, 0, 0, 0, 2}, Dev: dev},
			{IP: netip.MustParseAddr("10.244.3.0"), MAC: backend.MAC{0x0e, 0, 0, 0, 0, 3}, Dev: dev},
		},
		FDB: []backend.FDBEntry{
			{MAC: backend.MAC{0x0e, 0, 0, 0, 0, 2}, Dst: netip.MustParseAddr("192.0.2.12"), Dev: dev},
			{MAC: backend.MAC{0x0e, 0, 0, 0, 0, 3}, Dst: netip.MustParseAddr("198.51.100.3"), Dev: dev},
		},
	}
	if got, w := dump(st), dump(want); got != w {
		t.Errorf("state:\n%s\nwant:\n%s", got, w)
	}

	// DirectRouting: the peer on the connected network gets a plain route, the other stays on the overlay.
	n = node(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`)
	st, _ = Desired(n, own, peers)
	if len(st.Routes) != 2 || st.Routes[0].Dev != "eth0" || st.Routes[0].Gw != netip.MustParseAddr("192.0.2.12") || st.Routes[0].Onlink ||
		st.Routes[1].Dev != dev || len(st.FDB) != 1 || len(st.Neighbors) != 1 {
		t.Errorf("direct routing state:\n%s", dump(st))
	}
}

// TestDesiredSkipsBadPeers: each bad lease is skipped with a reason, the good one stays.
func TestDesiredSkipsBadPeers(t *testing.T) {
	n := node(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	own := lease("10.244.1.0/24", "192.0.2.10", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}`)
	good := lease("10.244.2.0/24", "192.0.2.12", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`)
	hostgw := lease("10.244.9.0/24", "192.0.2.19", `null`)
	hostgw.Attrs.BackendType = "host-gw"
	bad := map[string]subnet.Lease{
		"outside":      lease("10.245.3.0/24", "192.0.2.13", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:03"}`),
		"length":       lease("10.244.4.0/25", "192.0.2.14", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:04"}`),
		"overlaps own": lease("10.244.0.0/23", "192.0.2.15", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:05"}`),
		"zero mac":     lease("10.244.6.0/24", "192.0.2.16", `{"VNI":1,"VtepMAC":"00:00:00:00:00:00"}`),
		"multicast":    lease("10.244.7.0/24", "192.0.2.17", `{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}`),
		"bad mac":      lease("10.244.8.0/24", "192.0.2.18", `{"VNI":1,"VtepMAC":"zz"}`),
		"host-gw":      hostgw,
		"no ip":        lease("10.244.10.0/24", "", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:0a"}`),
		"loopback":     lease("10.244.11.0/24", "127.0.0.1", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:0b"}`),
		"own ip":       lease("10.244.12.0/24", "192.0.2.10", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:0c"}`),
		"dup ip":       lease("10.244.13.0/24", "192.0.2.12", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:0d"}`),
		"dup mac":      lease("10.244.14.0/24", "192.0.2.24", `{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`),
		"vni":          lease("10.244.15.0/24", "192.0.2.25", `{"VNI":4096,"VtepMAC":"0e:00:00:00:00:0f"}`),
		"no data":      lease("10.244.16.0/24", "192.0.2.26", ``),
		"data array":   lease("10.244.17.0/24", "192.0.2.27", `[1]`),
	}
	peers := []subnet.Lease{good}
	for _, l := range bad {
		peers = append(peers, l)
	}
	st, skipped := Desired(n, own, peers)
	if len(st.Routes) != 1 || st.Routes[0].Dst != good.Subnet || len(st.FDB) != 1 || len(st.Neighbors) != 1 {
		t.Errorf("state:\n%s", dump(st))
	}
	if len(skipped) != len(bad) {
		t.Errorf("skipped %d, want %d: %v", len(skipped), len(bad), skipped)
	}
	for _, s := range skipped {
		if s.Reason == "" || s.Code == "" || s.Key == good.Key() {
			t.Errorf("bad skip %+v", s)
		}
	}
}

func TestDataRoundTrip(t *testing.T) {
	d := Data{VNI: 4096, VtepMAC: backend.MAC{0xc6, 0xd2, 0x32, 0x6f, 0x8f, 0x44}}
	if got := string(d.Encode()); got != `{"VNI":4096,"VtepMAC":"c6:d2:32:6f:8f:44"}` {
		t.Errorf("encode %s", got)
	}
	back, err := DecodeData(d.Encode())
	if err != nil || back != d {
		t.Errorf("decode %+v %v", back, err)
	}
	// HNS writes MACs with dashes; flannel's Windows nodes publish them in colon form, but
	// accept both.
	if d, err := DecodeData(json.RawMessage(`{"VNI":4096,"VtepMAC":"00-15-5D-01-02-03"}`)); err != nil || d.VtepMAC.String() != "00:15:5d:01:02:03" {
		t.Errorf("dash form: %+v %v", d, err)
	}
}

func FuzzDecodeData(f *testing.F) {
	f.Add([]byte(`{"VNI":1,"VtepMAC":"c6:d2:32:6f:8f:44"}`))
	f.Add([]byte(`{"VNI":-1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeData(b)
		if err != nil {
			return
		}
		if !d.VtepMAC.IsUsable() {
			t.Fatalf("accepted unusable MAC %s", d.VtepMAC)
		}
		back, err := DecodeData(d.Encode())
		if err != nil || back != d {
			t.Fatalf("round trip %+v -> %+v %v", d, back, err)
		}
	})
}

func dump(st backend.State) string {
	var b strings.Builder
	if st.VXLAN != nil {
		b.WriteString(strings.ReplaceAll(strings.TrimSpace(jsonOf(st.VXLAN)), "\n", " ") + "\n")
	}
	for _, r := range st.Routes {
		b.WriteString("route " + r.Dst.String() + " via " + r.Gw.String() + " dev " + r.Dev)
		if r.Onlink {
			b.WriteString(" onlink")
		}
		b.WriteString("\n")
	}
	for _, n := range st.Neighbors {
		b.WriteString("neigh " + n.IP.String() + " lladdr " + n.MAC.String() + " dev " + n.Dev + "\n")
	}
	for _, f := range st.FDB {
		b.WriteString("fdb " + f.MAC.String() + " dst " + f.Dst.String() + " dev " + f.Dev + "\n")
	}
	return b.String()
}

func jsonOf(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestMTU: Backend.MTU is the underlay MTU, as flanneld reads it; the overlay gets 50 less.
func TestMTU(t *testing.T) {
	n := node(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	if got := n.MTU(); got != 1450 {
		t.Errorf("interface MTU 1500: overlay MTU %d, want 1450", got)
	}
	n = node(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":1400}}`)
	if got := n.MTU(); got != 1350 {
		t.Errorf("Backend.MTU 1400: overlay MTU %d, want 1350 (flanneld's)", got)
	}
}
