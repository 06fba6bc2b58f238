package ctl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
)

const (
	ownMAC  = "0a:00:00:00:00:01"
	peerMAC = "0a:00:00:00:00:02"
)

func mustConfig(t *testing.T, js string) *subnet.Config {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func vxlanLease(sn, public, mac string) subnet.Lease {
	return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{
		PublicIP: netip.MustParseAddr(public), BackendType: "vxlan",
		BackendData: json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, mac)),
	}}
}

func entriesOf(leases ...subnet.Lease) []Entry {
	var es []Entry
	for _, l := range leases {
		es = append(es, Entry{Key: "/coreos.com/network/subnets/" + l.Key(), Lease: l})
	}
	return es
}

// healthyVXLAN is node 192.0.2.11 holding 10.244.1.0/24, with one peer, everything in order.
func healthyVXLAN(t *testing.T) node {
	ext := netif.External{Name: "eth0", MTU: 1500, Addr: netip.MustParseAddr("192.0.2.11"), PublicIP: netip.MustParseAddr("192.0.2.11"),
		Connected: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}}
	return node{
		addr: defaultAddr, readyCode: 200, readyBody: "ok",
		cfg:        mustConfig(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`),
		entries:    entriesOf(vxlanLease("10.244.1.0/24", "192.0.2.11", ownMAC), vxlanLease("10.244.2.0/24", "192.0.2.12", peerMAC)),
		subnetFile: "/run/flannel/subnet.env",
		env: subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
			netip.Prefix{}, netip.Prefix{}, 1450, false),
		ext:    ext,
		extVia: "weftd's --iface",
		caps:   linux.Capabilities(),
		kernel: map[backend.Family]*Kernel{backend.IPv4: {Device: &Device{Name: "flannel.1", Up: true, MTU: 1450, MAC: ownMAC}}},
	}
}

// failures lists the failed findings as "check: what".
func failures(r DoctorReport) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Result == resultFail {
			out = append(out, f.Check+": "+f.What)
		}
	}
	return out
}

func TestDiagnoseHealthy(t *testing.T) {
	n := healthyVXLAN(t)
	r := diagnose(n)
	if r.Problems != 0 {
		t.Fatalf("healthy node: problems %q", failures(r))
	}
	var checks []string
	for _, f := range r.Findings {
		checks = append(checks, f.Check+" "+f.Result)
	}
	want := "weftd ok, datastore ok, interface ok, lease ok, subnet.env ok, mtu ok, device ok, route ok, neighbor ok, fdb ok, address ok, peers ok"
	if got := strings.Join(checks, ", "); got != want {
		t.Errorf("findings:\n got %s\nwant %s", got, want)
	}
	if want := "eth0 192.0.2.11 MTU 1500, lease 10.244.1.0/24, backend vxlan"; r.Node != want {
		t.Errorf("node %q, want %q", r.Node, want)
	}

	e, err := expect(n)
	if err != nil {
		t.Fatal(err)
	}
	st := e.fams[0].state
	w, _ := linux.WantOf(st, false)
	if _, routes, _, _ := w.Entries(); len(routes) != 1 || routes[0].Dst != netip.MustParsePrefix("10.244.2.0/24") || e.mtu != 1450 {
		t.Errorf("expected state %+v, MTU %d; want one route to 10.244.2.0/24, MTU 1450", st, e.mtu)
	}
	if _, owned := linux.WantOf(st, false); owned.Devices[0] != "eth0" || owned.Own[0] != netip.MustParsePrefix("10.244.1.0/24") {
		t.Errorf("ownership %+v", owned)
	}
}

// TestDiagnoseProblems: each problem is found, alone, with a fix.
func TestDiagnoseProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(n *node)
		want  []string // failures, each "check: " and the start of what
	}{
		{"weftd down", func(n *node) { n.readyErr, n.readyCode = errors.New("connection refused"), 0 },
			[]string{"weftd: no answer: connection refused"}},
		{"weftd not ready", func(n *node) { n.readyCode, n.readyBody = 503, "data plane not converged yet" },
			[]string{"weftd: not ready (503): data plane not converged yet"}},
		{"datastore unreachable", func(n *node) { n.storeErr = errors.New("context deadline exceeded") },
			[]string{"datastore: context deadline exceeded"}},
		{"no interface", func(n *node) { n.extErr = errors.New("--iface=eth9: no such interface on this node") },
			[]string{"interface: --iface=eth9"}},
		{"no own lease", func(n *node) { n.entries = n.entries[1:] },
			[]string{"lease: no lease carries this node's public IPv4 address 192.0.2.11"}},
		{"two leases for one node", func(n *node) {
			n.entries = append(n.entries, entriesOf(vxlanLease("10.244.9.0/24", "192.0.2.11", ownMAC))...)
		}, []string{"lease: other leases carry this node's public IP too: 10.244.9.0-24"}},
		{"lease of another backend", func(n *node) { n.entries[0].Lease.Attrs.BackendType = "host-gw" },
			[]string{`lease: lease 10.244.1.0-24 publishes backend "host-gw"`}},
		{"VtepMAC not the device's", func(n *node) { n.kernel[backend.IPv4].Device.MAC = "0a:00:00:00:00:99" },
			[]string{"lease: lease 10.244.1.0-24 publishes VtepMAC 0a:00:00:00:00:01, but flannel.1 has MAC 0a:00:00:00:00:99"}},
		{"subnet.env unreadable", func(n *node) { n.envErr = errors.New("read subnet env: no such file") },
			[]string{"subnet.env: read subnet env: no such file"}},
		{"subnet.env of another subnet", func(n *node) { n.env.Subnet = netip.MustParsePrefix("10.244.7.1/24") },
			[]string{"subnet.env: /run/flannel/subnet.env: FLANNEL_SUBNET=10.244.7.1/24, but this node's lease is 10.244.1.0/24"}},
		{"subnet.env of another network", func(n *node) { n.env.Network = netip.MustParsePrefix("10.1.0.0/16") },
			[]string{"subnet.env: /run/flannel/subnet.env: FLANNEL_NETWORK=10.1.0.0/16, the network config says 10.244.0.0/16"}},
		{"subnet.env MTU", func(n *node) { n.env.MTU = 1500 },
			[]string{"mtu: FLANNEL_MTU=1500, want 1450 (eth0's MTU 1500 less 50 for VXLAN)"}},
		{"device MTU", func(n *node) { n.kernel[backend.IPv4].Device.MTU = 1400 },
			[]string{"mtu: flannel.1 has MTU 1400, want 1450"}},
		{"interface MTU changed under both", func(n *node) { n.ext.MTU = 9000 },
			[]string{"mtu: FLANNEL_MTU=1450, want 8950", "mtu: flannel.1 has MTU 1450, want 8950"}},
		{"device missing", func(n *node) {
			n.kernel[backend.IPv4].Device = &Device{Name: "flannel.1", Missing: true}
			n.kernel[backend.IPv4].Drift = []Drift{{Kind: "route", Want: "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"}}
		}, []string{"device: flannel.1 does not exist", "route: missing: 10.244.2.0/24"}},
		{"device incompatible", func(n *node) { n.kernel[backend.IPv4].Device.Incompatible = "VNI 2, want 1" },
			[]string{"device: flannel.1 does not fit the network config: VNI 2, want 1"}},
		{"device down", func(n *node) { n.kernel[backend.IPv4].Device.Up = false },
			[]string{"device: flannel.1 is down"}},
		{"kernel unreadable", func(n *node) { n.kernel, n.kernelErr = nil, errors.New("operation not permitted") },
			[]string{"kernel: reading the data plane: operation not permitted"}},
		{"drift", func(n *node) {
			n.kernel[backend.IPv4].Drift = []Drift{
				{Kind: "route", Want: "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink", Have: "10.244.2.0/24 via 10.244.2.9 dev flannel.1 onlink"},
				{Kind: "route", Have: "10.244.9.0/24 via 10.244.9.0 dev flannel.1 onlink"},
				{Kind: "neighbor", Want: "10.244.2.0 lladdr " + peerMAC + " dev flannel.1"},
				{Kind: "fdb", Want: peerMAC + " dev flannel.1 dst 192.0.2.12", Have: peerMAC + " dev flannel.1 dst 192.0.2.99"},
				{Kind: "address", Have: "10.244.9.0/32 dev flannel.1"},
			}
		}, []string{
			"route: wrong: 10.244.2.0/24 via 10.244.2.9 dev flannel.1 onlink, want 10.244.2.0/24 via 10.244.2.0",
			"route: stale, no lease asks for it: 10.244.9.0/24",
			"neighbor: missing: 10.244.2.0 lladdr",
			"fdb: wrong: " + peerMAC + " dev flannel.1 dst 192.0.2.99, want",
			"address: stale, no lease asks for it: 10.244.9.0/32 dev flannel.1",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := healthyVXLAN(t)
			tc.spoil(&n)
			r := diagnose(n)
			got := failures(r)
			if r.Problems != len(got) || len(got) != len(tc.want) {
				t.Fatalf("problems %d, failures:\n  %s\nwant:\n  %s", r.Problems, strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("failure %d:\n got %s\nwant %s...", i, got[i], w)
				}
			}
			for _, f := range r.Findings {
				if f.Result == resultFail && f.Fix == "" {
					t.Errorf("%s: %s: no fix", f.Check, f.What)
				}
			}
		})
	}
}

func TestDiagnoseFixes(t *testing.T) {
	n := healthyVXLAN(t)
	n.kernel[backend.IPv4].Drift = []Drift{
		{Kind: "route", Want: "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"},
		{Kind: "fdb", Have: peerMAC + " dev flannel.1 dst 192.0.2.12"},
	}
	fixes := func(n node) []string {
		var out []string
		for _, f := range diagnose(n).Findings {
			if f.Check == "route" || f.Check == "fdb" {
				out = append(out, f.Fix)
			}
		}
		return out
	}
	// weftd runs: it should have repaired this, so someone else is at work.
	got := fixes(n)
	if len(got) != 2 || !strings.HasPrefix(got[0], "weftd runs, yet has not repaired this") ||
		!strings.HasSuffix(got[0], "by hand: ip route replace 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink") ||
		!strings.HasSuffix(got[1], "by hand: bridge fdb del "+peerMAC+" dev flannel.1 dst 192.0.2.12 self") {
		t.Errorf("fixes with weftd running:\n%s", strings.Join(got, "\n"))
	}
	n.readyErr = errors.New("connection refused")
	if got := fixes(n); !strings.HasPrefix(got[0], "start weftd: it converges at once") {
		t.Errorf("fix with weftd stopped: %s", got[0])
	}
}

func TestDiagnoseWarnings(t *testing.T) {
	n := healthyVXLAN(t)
	bad := Entry{Key: "/coreos.com/network/subnets/10.244.5.0-24", Err: errors.New("lease attributes: PublicIP \"x\" is not an IPv4 address")}
	n.entries = append(n.entries, bad)
	n.entries = append(n.entries, entriesOf(vxlanLease("10.244.3.0/24", "192.0.2.13", peerMAC))...) // the MAC of 10.244.2.0
	r := diagnose(n)
	if r.Problems != 0 {
		t.Fatalf("warnings counted as problems: %q", failures(r))
	}
	var warns []string
	for _, f := range r.Findings {
		if f.Result == resultWarn {
			warns = append(warns, f.Check+": "+f.What)
		}
	}
	want := []string{
		"datastore: unreadable lease /coreos.com/network/subnets/10.244.5.0-24: lease attributes: PublicIP \"x\" is not an IPv4 address",
		"peers: lease 10.244.3.0-24 skipped: VtepMAC " + peerMAC + " is also used by 10.244.2.0-24",
	}
	if strings.Join(warns, "\n") != strings.Join(want, "\n") {
		t.Errorf("warnings:\n got %s\nwant %s", strings.Join(warns, "\n     "), strings.Join(want, "\n     "))
	}
}

func TestDiagnoseHostGW(t *testing.T) {
	n := healthyVXLAN(t)
	n.cfg = mustConfig(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"host-gw"}}`)
	for i := range n.entries {
		n.entries[i].Lease.Attrs.BackendType, n.entries[i].Lease.Attrs.BackendData = "host-gw", nil
	}
	n.env.MTU = 1500
	n.kernel = map[backend.Family]*Kernel{backend.IPv4: {}}
	r := diagnose(n)
	if r.Problems != 0 {
		t.Fatalf("healthy host-gw node: %q", failures(r))
	}
	for _, f := range r.Findings {
		if f.Check == "device" || f.Check == "neighbor" || f.Check == "fdb" || f.Check == "address" {
			t.Errorf("host-gw has no overlay device, yet: %+v", f)
		}
	}
	n.env.MTU = 1450
	if got := failures(diagnose(n)); len(got) != 1 || got[0] != "mtu: FLANNEL_MTU=1450, want 1500 (eth0's MTU)" {
		t.Errorf("host-gw with the VXLAN MTU in subnet.env: %q", got)
	}
}

// TestInterfaceChoice: the doctor chooses the interface with weftd's own choice
// (netif.Pick on daemon.Config.Choice): by weftd's flags when it has them, else by what
// weftd's /status reports, else by the default route as weftd without flags; the public
// addresses weftd reports are the ones it publishes.
func TestInterfaceChoice(t *testing.T) {
	ifs := []netif.Interface{
		{Name: "lo", MTU: 65536, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Name: "eth0", MTU: 1500, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("192.0.2.11/24"), netip.MustParsePrefix("fd77::11/64")}},
		{Name: "eth1", MTU: 9000, Up: true, Prefix: []netip.Prefix{netip.MustParsePrefix("198.51.100.7/24")}},
	}
	defaultIf := func() (string, error) { return "eth0", nil }
	fromWeftd := &status.Node{Interface: "eth1", Address: "198.51.100.7", PublicIP: "203.0.113.1"}
	v4 := mustConfig(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	dual := mustConfig(t, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10::/56","Backend":{"Type":"vxlan"}}`)
	for _, tc := range []struct {
		name   string
		flags  func(c *daemon.Config)
		net    *subnet.Config
		status *status.Node
		want   string // "name addr public addr6 public6 mtu, via", or the error
	}{
		{"default route", func(*daemon.Config) {}, v4, nil,
			"eth0 192.0.2.11 192.0.2.11 invalid IP invalid IP 1500, by the default route, as weftd without --iface"},
		{"default route, dual-stack", func(*daemon.Config) {}, dual, nil,
			"eth0 192.0.2.11 192.0.2.11 fd77::11 fd77::11 1500, by the default route, as weftd without --iface"},
		{"weftd's flags", func(c *daemon.Config) { c.Ifaces = []string{"bond0", "eth1"} }, v4, nil,
			"eth1 198.51.100.7 198.51.100.7 invalid IP invalid IP 9000, by weftd's --iface"},
		{"weftd's regexp", func(c *daemon.Config) { c.IfaceRegexs = []string{`^198\.51\.`} }, v4, nil,
			"eth1 198.51.100.7 198.51.100.7 invalid IP invalid IP 9000, by weftd's --iface"},
		{"weftd's --public-ip", func(c *daemon.Config) { c.PublicIP = "203.0.113.9" }, v4, nil,
			"eth0 192.0.2.11 203.0.113.9 invalid IP invalid IP 1500, by the default route, as weftd without --iface"},
		{"weftd's status", func(*daemon.Config) {}, v4, fromWeftd,
			"eth1 198.51.100.7 203.0.113.1 invalid IP invalid IP 9000, by weftd's /status"},
		{"weftd's flags over its status", func(c *daemon.Config) { c.Ifaces = []string{"eth0"} }, v4, fromWeftd,
			"eth0 192.0.2.11 203.0.113.1 invalid IP invalid IP 1500, by weftd's --iface"},
		{"no such interface", func(c *daemon.Config) { c.Ifaces = []string{"eth7"} }, v4, nil,
			"no usable interface among --iface=[eth7] --iface-regex=[] --iface-can-reach=\"\": []"},
		{"a family the interface lacks", func(c *daemon.Config) { c.Ifaces = []string{"eth1"} }, dual, nil,
			"no usable interface among --iface=[eth1] --iface-regex=[] --iface-can-reach=\"\": [interface eth1 has no global IPv6 address, and the network config enables IPv6 (EnableIPv6)]"},
		{"bad --public-ip", func(c *daemon.Config) { c.PublicIP = "2001:db8::1" }, v4, nil, `--public-ip="2001:db8::1": not an IPv4 address`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := daemon.DefaultConfig()
			tc.flags(&cfg)
			choice, via := interfaceChoice(cfg, tc.net, tc.status)
			ext, err := netif.Pick(choice, ifs, defaultIf)
			got := fmt.Sprintf("%s %s %s %s %s %d, by %s", ext.Name, ext.Addr, ext.PublicIP, ext.Addr6, ext.PublicIPv6, ext.MTU, via)
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestFixCommand(t *testing.T) {
	for _, tc := range []struct{ kind, op, entry, want string }{
		{"route", "replace", "10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink", "ip route replace 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"},
		{"route", "del", "10.244.9.0/24 via 192.0.2.19 dev eth0", "ip route del 10.244.9.0/24 via 192.0.2.19 dev eth0"},
		{"neighbor", "replace", "10.244.2.0 lladdr " + peerMAC + " dev flannel.1", "ip neigh replace 10.244.2.0 lladdr " + peerMAC + " dev flannel.1 nud permanent"},
		{"neighbor", "del", "10.244.9.0 lladdr " + peerMAC + " dev flannel.1", "ip neigh del 10.244.9.0 lladdr " + peerMAC + " dev flannel.1"},
		{"fdb", "replace", peerMAC + " dev flannel.1 dst 192.0.2.12", "bridge fdb replace " + peerMAC + " dev flannel.1 dst 192.0.2.12 self permanent"},
		{"fdb", "del", peerMAC + " dev flannel.1 dst 192.0.2.12", "bridge fdb del " + peerMAC + " dev flannel.1 dst 192.0.2.12 self"},
		{"address", "replace", "10.244.1.0/32 dev flannel.1", "ip addr add 10.244.1.0/32 dev flannel.1"},
		{"address", "del", "10.244.9.0/32 dev flannel.1", "ip addr del 10.244.9.0/32 dev flannel.1"},
	} {
		if got := fixCommand(tc.kind, tc.op, tc.entry); got != tc.want {
			t.Errorf("fixCommand(%s, %s):\n got %s\nwant %s", tc.kind, tc.op, got, tc.want)
		}
	}
}

func TestWriteDoctor(t *testing.T) {
	r := report("eth0 192.0.2.11 MTU 1500, lease 10.244.1.0/24, backend vxlan", []Finding{
		{Check: "weftd", Result: resultOK, What: "ready (http://127.0.0.1:8285/readyz)"},
		{Check: "route", Result: resultFail, What: "missing: 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink",
			Fix: "start weftd; or by hand: ip route replace 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink"},
		{Check: "peers", Result: resultWarn, What: "lease 10.244.3.0-24 skipped: VNI 2, this node uses 1", Fix: "fix that node"},
		{Check: "route", Family: "IPv6", Result: resultOK, What: "1 as the leases say"},
	})
	var b bytes.Buffer
	if err := writeDoctor(&b, r); err != nil {
		t.Fatal(err)
	}
	want := `node: eth0 192.0.2.11 MTU 1500, lease 10.244.1.0/24, backend vxlan

CHECK       RESULT  WHAT
weftd       ok      ready (http://127.0.0.1:8285/readyz)
route       FAIL    missing: 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink
                    fix: start weftd; or by hand: ip route replace 10.244.2.0/24 via 10.244.2.0 dev flannel.1 onlink
peers       warn    lease 10.244.3.0-24 skipped: VNI 2, this node uses 1
                    fix: fix that node
route IPv6  ok      1 as the leases say

1 problem found
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := writeJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var back DoctorReport
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Problems != 1 || len(back.Findings) != 4 || back.Findings[1] != r.Findings[1] || back.Findings[3] != r.Findings[3] || back.Node != r.Node {
		t.Errorf("JSON round trip: %+v\nwant %+v", back, r)
	}
	for _, key := range []string{`"check": "route"`, `"result": "fail"`, `"problems": 1`, `"fix": "start weftd;`} {
		if !strings.Contains(b.String(), key) {
			t.Errorf("JSON lacks %s:\n%s", key, b.String())
		}
	}
}

// TestExpectations: the MTU and its reason follow the config, and leases that share the
// node's public IP are told apart by subnet.env.
func TestExpectations(t *testing.T) {
	n := healthyVXLAN(t)
	n.cfg = mustConfig(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","MTU":1400,"VNI":7,"Port":4789}}`)
	e, err := expect(n)
	if err != nil {
		t.Fatal(err)
	}
	if e.mtu != 1350 || e.mtuWhy != "Backend.MTU 1400 of the network config less 50 for VXLAN" || e.fams[0].state.Device.VNI != 7 || e.fams[0].state.Device.Port != 4789 {
		t.Errorf("MTU %d (%s), device %+v; want 1350 from the config's 1400, VNI 7, port 4789", e.mtu, e.mtuWhy, e.fams[0].state.Device)
	}

	n = healthyVXLAN(t)
	stale := vxlanLease("10.244.0.0/24", "192.0.2.11", ownMAC) // sorts first
	n.entries = append(entriesOf(stale), n.entries...)
	if e, err = expect(n); err != nil || e.own.Subnet != netip.MustParsePrefix("10.244.1.0/24") || len(e.sharing) != 1 || e.sharing[0] != stale.Key() {
		t.Errorf("own %s, sharing %q (%v); want 10.244.1.0/24 (subnet.env's), sharing the stale one", e.own.Subnet, e.sharing, err)
	}

	n.cfg = mustConfig(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`)
	n.cfg.Backend.Type = "udp"
	if _, err := expect(n); err == nil || !strings.Contains(err.Error(), `Backend.Type=udp`) {
		t.Errorf("udp backend: %v", err)
	}
}

const (
	ownMAC6  = "0a:00:00:00:06:01"
	peerMAC6 = "0a:00:00:00:06:02"
)

func dualLease(sn, sn6, public, public6, mac, mac6 string) subnet.Lease {
	l := vxlanLease(sn, public, mac)
	l.IPv6Subnet = netip.MustParsePrefix(sn6)
	l.Attrs.PublicIPv6 = netip.MustParseAddr(public6)
	l.Attrs.BackendV6Data = json.RawMessage(fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, mac6))
	return l
}

// healthyDual is healthyVXLAN in a dual-stack network: both families' devices, both halves
// of each lease.
func healthyDual(t *testing.T) node {
	n := healthyVXLAN(t)
	n.cfg = mustConfig(t, `{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`)
	n.ext.Addr6, n.ext.PublicIPv6 = netip.MustParseAddr("fd77::11"), netip.MustParseAddr("fd77::11")
	n.ext.Connected = append(n.ext.Connected, netip.MustParsePrefix("fd77::/64"))
	n.entries = entriesOf(dualLease("10.244.1.0/24", "fd00:10:244:1::/64", "192.0.2.11", "fd77::11", ownMAC, ownMAC6),
		dualLease("10.244.2.0/24", "fd00:10:244:2::/64", "192.0.2.12", "fd77::12", peerMAC, peerMAC6))
	n.env = subnet.NewEnv(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
		netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1430, false)
	n.kernel[backend.IPv6] = &Kernel{Device: &Device{Name: "flannel-v6.1", Up: true, MTU: 1430, MAC: ownMAC6}}
	return n
}

// checks lists the findings as "check[ family] result".
func checks(r DoctorReport) string {
	var out []string
	for _, f := range r.Findings {
		out = append(out, strings.TrimSpace(f.Check+" "+f.Family)+" "+f.Result)
	}
	return strings.Join(out, ", ")
}

// TestDiagnoseDualStack: both halves of the node are judged, each finding of a family's
// device, lease half, MTU and entries naming the family; the pods' MTU is the smaller one,
// IPv6's (70 bytes of VXLAN over IPv6).
func TestDiagnoseDualStack(t *testing.T) {
	r := diagnose(healthyDual(t))
	if r.Problems != 0 {
		t.Fatalf("healthy dual-stack node: problems %q", failures(r))
	}
	want := "weftd ok, datastore ok, interface ok, lease ok, subnet.env ok, mtu ok, device ok, route ok, neighbor ok, fdb ok, address ok, " +
		"device IPv6 ok, route IPv6 ok, neighbor IPv6 ok, fdb IPv6 ok, address IPv6 ok, peers ok, peers IPv6 ok"
	if got := checks(r); got != want {
		t.Errorf("findings:\n got %s\nwant %s", got, want)
	}
	if want := "eth0 192.0.2.11 fd77::11 MTU 1500, lease 10.244.1.0/24 fd00:10:244:1::/64, backend vxlan"; r.Node != want {
		t.Errorf("node %q, want %q", r.Node, want)
	}
	for _, f := range r.Findings {
		if f.Check == "mtu" && f.What != "1430 (eth0's MTU 1500 less 70 for VXLAN over IPv6)" {
			t.Errorf("mtu: %s", f.What)
		}
	}

	for _, tc := range []struct {
		name  string
		spoil func(n *node)
		want  []string // failures, "check family: what" prefixes
	}{
		{"IPv6 route missing", func(n *node) {
			n.kernel[backend.IPv6].Drift = []Drift{{Kind: "route", Want: "fd00:10:244:2::/64 via fd00:10:244:2:: dev flannel-v6.1 onlink"}}
		}, []string{"route IPv6: missing: fd00:10:244:2::/64"}},
		{"IPv6 VtepMAC", func(n *node) { n.kernel[backend.IPv6].Device.MAC = "0a:00:00:00:06:99" },
			[]string{"lease IPv6: lease 10.244.1.0-24&fd00:10:244:1::-64 publishes VtepMAC " + ownMAC6 + ", but flannel-v6.1 has MAC 0a:00:00:00:06:99"}},
		{"IPv6 public address", func(n *node) { n.ext.PublicIPv6 = netip.MustParseAddr("fd77::99") },
			[]string{"lease IPv6: lease 10.244.1.0-24&fd00:10:244:1::-64 publishes the public IPv6 address fd77::11, this node's is fd77::99"}},
		{"IPv6 device MTU", func(n *node) { n.kernel[backend.IPv6].Device.MTU = 1450 },
			[]string{"mtu IPv6: flannel-v6.1 has MTU 1450, want 1430"}},
		{"subnet.env without IPv6", func(n *node) { n.env.IPv6Network, n.env.IPv6Subnet = netip.Prefix{}, netip.Prefix{} },
			[]string{"subnet.env: /run/flannel/subnet.env: FLANNEL_IPV6_NETWORK=-, the network config says fd00:10:244::/56",
				"subnet.env: /run/flannel/subnet.env: FLANNEL_IPV6_SUBNET=-, but this node's lease is fd00:10:244:1::/64"}},
		{"IPv4 MTU in subnet.env", func(n *node) { n.env.MTU = 1450 },
			[]string{"mtu: FLANNEL_MTU=1450, want 1430 (eth0's MTU 1500 less 70 for VXLAN over IPv6)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := healthyDual(t)
			tc.spoil(&n)
			r := diagnose(n)
			var got []string
			for _, f := range r.Findings {
				if f.Result == resultFail {
					got = append(got, strings.TrimSpace(f.Check+" "+f.Family)+": "+f.What)
				}
			}
			if len(got) != len(tc.want) {
				t.Fatalf("failures:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("failure %d:\n got %s\nwant %s...", i, got[i], w)
				}
			}
		})
	}
}

// TestDiagnoseIPv6Only: an IPv6-only node is judged by its IPv6 half alone: its lease by its
// public IPv6 address, its device and routes.
func TestDiagnoseIPv6Only(t *testing.T) {
	n := healthyDual(t)
	n.cfg = mustConfig(t, `{"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":"vxlan"}}`)
	n.ext.Addr, n.ext.PublicIP = netip.Addr{}, netip.Addr{}
	for i := range n.entries {
		l := &n.entries[i].Lease
		l.Subnet, l.Attrs.PublicIP, l.Attrs.BackendData = netip.Prefix{}, netip.Addr{}, nil
	}
	n.env = subnet.NewEnv(netip.Prefix{}, netip.Prefix{}, netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1430, false)
	delete(n.kernel, backend.IPv4)
	r := diagnose(n)
	if r.Problems != 0 {
		t.Fatalf("healthy IPv6-only node: problems %q", failures(r))
	}
	want := "weftd ok, datastore ok, interface ok, lease ok, subnet.env ok, mtu ok, device IPv6 ok, route IPv6 ok, neighbor IPv6 ok, fdb IPv6 ok, address IPv6 ok, peers IPv6 ok"
	if got := checks(r); got != want {
		t.Errorf("findings:\n got %s\nwant %s", got, want)
	}
	n.entries = n.entries[1:]
	if got := failures(diagnose(n)); len(got) != 1 || got[0] != "lease: no lease carries this node's public IPv6 address fd77::11" {
		t.Errorf("without its lease: %q", got)
	}
}

// TestDiagnoseKube: in Kubernetes mode the node's lease is its Node's, whatever address it
// publishes; what it publishes is judged against the node; a Node whose lease cannot be
// read is named, and the fixes speak of Nodes, not etcd keys.
func TestDiagnoseKube(t *testing.T) {
	kubeNode := func() node {
		n := healthyVXLAN(t)
		n.kube, n.nodeName = true, "self"
		n.entries[0].Key, n.entries[1].Key = "self", "peer"
		return n
	}
	r := diagnose(kubeNode())
	if r.Problems != 0 {
		t.Fatalf("healthy node: problems %q", failures(r))
	}
	if !slices.ContainsFunc(r.Findings, func(f Finding) bool { return f.Check == "lease" && strings.HasSuffix(f.What, ", Node self") }) {
		t.Errorf("findings %+v: the lease is not said to be Node self's", r.Findings)
	}

	n := kubeNode()
	n.entries[0].Lease.Attrs.PublicIP = netip.MustParseAddr("192.0.2.99")
	if got := failures(diagnose(n)); len(got) != 1 || !strings.HasPrefix(got[0], "lease: lease 10.244.1.0-24 publishes the public IPv4 address 192.0.2.99, this node's is 192.0.2.11") {
		t.Errorf("a lease of another public IP: %q", got)
	}
	n = kubeNode()
	n.nodeName = "other"
	if got := failures(diagnose(n)); len(got) != 1 || !strings.HasPrefix(got[0], "lease: the Node other publishes no lease") {
		t.Errorf("no lease: %q", got)
	}
	n = kubeNode()
	n.entries[0].Err = errors.New("annotation flannel.alpha.coreos.com/public-ip missing")
	r = diagnose(n)
	if got := failures(r); len(got) != 1 || got[0] != "lease: the lease of Node self cannot be read: annotation flannel.alpha.coreos.com/public-ip missing" {
		t.Errorf("an unreadable lease: %q", got)
	}
	for _, f := range r.Findings {
		if f.Check == "datastore" && f.Result == resultWarn && !strings.Contains(f.Fix, "annotations of Node self") {
			t.Errorf("fix of an unreadable Node: %q", f.Fix)
		}
	}
}
