package backend

import (
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/subnet"
)

// flannelWGAttrs builds, from the source of the flanneld that tools/flannel pins, the struct
// flanneld marshals a wireguard lease's BackendData from and unmarshals its peers' into
// (wireguardLeaseAttrs, unexported, so out of an import's reach): field names and Go types as
// flannel declares them, so that encoding/json treats it as flanneld's binary does.
func flannelWGAttrs(t *testing.T) reflect.Type {
	t.Helper()
	cmd := exec.Command("go", "mod", "download", "-json", "github.com/flannel-io/flannel")
	cmd.Dir = filepath.Join("..", "tools", "flannel")
	out, err := cmd.Output()
	var mod struct{ Dir string }
	if jerr := json.Unmarshal(out, &mod); jerr != nil || mod.Dir == "" {
		t.Skipf("no flannel source (go mod download in %s: %v)", cmd.Dir, err)
	}
	file := filepath.Join(mod.Dir, "pkg", "backend", "wireguard", "wireguard_network.go")
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]reflect.Type{"string": reflect.TypeFor[string](), "uint16": reflect.TypeFor[uint16]()}
	var fields []reflect.StructField
	ast.Inspect(f, func(n ast.Node) bool {
		ts, ok := n.(*ast.TypeSpec)
		if !ok || ts.Name.Name != "wireguardLeaseAttrs" {
			return true
		}
		for _, fl := range ts.Type.(*ast.StructType).Fields.List {
			id, _ := fl.Type.(*ast.Ident)
			if id == nil || kinds[id.Name] == nil || fl.Tag != nil {
				t.Fatalf("%s: wireguardLeaseAttrs has a field of type %v (or a tag): this test knows string and uint16", file, fl.Type)
			}
			for _, name := range fl.Names {
				fields = append(fields, reflect.StructField{Name: name.Name, Type: kinds[id.Name]})
			}
		}
		return false
	})
	if len(fields) == 0 {
		t.Fatalf("no wireguardLeaseAttrs in %s", file)
	}
	return reflect.StructOf(fields)
}

// TestWireGuardDataFlannel: flanneld reads the BackendData weftd writes (the public key its
// wgtypes.ParseKey takes, the port), and weftd reads what flanneld writes, for a key and port
// of each end's own.
func TestWireGuardDataFlannel(t *testing.T) {
	typ := flannelWGAttrs(t)
	priv := Key{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	ours := WireGuardData{PublicKey: priv.PublicKey(), Port: 51821}

	theirs := reflect.New(typ)
	if err := json.Unmarshal(ours.Encode(), theirs.Interface()); err != nil {
		t.Fatalf("flanneld cannot decode %s: %v", ours.Encode(), err)
	}
	key := theirs.Elem().FieldByName("PublicKey").String()
	port := theirs.Elem().FieldByName("Port").Uint()
	if k, err := ParseKey(key); err != nil || k != ours.PublicKey || port != 51821 {
		t.Errorf("flanneld reads %s as key %q port %d", ours.Encode(), key, port)
	}
	if strings.ContainsAny(key, "-_") || len(key) != 44 {
		t.Errorf("key %q is not standard padded base64, which wgtypes.ParseKey reads", key)
	}

	// What flanneld writes: json.Marshal of its struct.
	other := Key{42}.PublicKey()
	w := reflect.New(typ).Elem()
	w.FieldByName("PublicKey").SetString(other.String())
	w.FieldByName("Port").SetUint(51820)
	raw, err := json.Marshal(w.Interface())
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeWireGuardData(raw)
	if err != nil || got != (WireGuardData{PublicKey: other, Port: 51820}) {
		t.Errorf("weftd reads flanneld's %s as %+v, %v", raw, got, err)
	}
}

// TestKeyPublic: the public key of a private key is X25519's, as wg pubkey computes it (the
// pair from wg(8)'s manual).
func TestKeyPublic(t *testing.T) {
	priv, err := ParseKey("yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=")
	if err != nil {
		t.Fatal(err)
	}
	if got := priv.PublicKey().String(); got != "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=" {
		t.Errorf("public key %s", got)
	}
}

// TestWireGuardHostileLeases: wireguard leases whose key or port cannot be read, or that
// claim a key already claimed (this node's, or an older peer's), are skipped with their code;
// a good one is programmed with its key and endpoint, and a lease without a port (flannel
// before ports were published) is dialled on this node's port.
func TestWireGuardHostileLeases(t *testing.T) {
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.42.0.0/16","Backend":{"Type":"wireguard","PersistentKeepaliveInterval":25}}`))
	if err != nil {
		t.Fatal(err)
	}
	priv := Key{0, 7} // X25519 clears the first byte's low bits: keys differ beyond it
	node := Node{Underlay: "eth0", Addr: netip.MustParseAddr("192.168.1.1"), PublicIP: netip.MustParseAddr("192.168.1.1"),
		MTU: 1500, WireGuardKey: priv}
	b, err := NewFor(cfg, node, Capabilities{WireGuard: WireGuardCapabilities{Has: Feature{Has: true}}}, IPv4)
	if err != nil {
		t.Fatal(err)
	}
	if b.MTU() != 1420 {
		t.Errorf("MTU %d, want 1420 (1500 less WireGuard's 80)", b.MTU())
	}
	own := subnet.Lease{Subnet: netip.MustParsePrefix("10.42.1.0/24"), Created: 1}
	b.AddAttrs(&own.Attrs, MAC{})
	if d, err := DecodeWireGuardData(own.Attrs.BackendData); err != nil || d.PublicKey != priv.PublicKey() || d.Port != 51820 || own.Attrs.BackendType != "wireguard" {
		t.Fatalf("own lease %+v: %+v %v", own.Attrs, d, err)
	}
	s := NewSet(b, own, false)
	good, other := Key{0, 8}.PublicKey(), Key{0, 9}.PublicKey()
	lease := func(n int, data string) subnet.Lease {
		return subnet.Lease{Subnet: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 42, byte(n), 0}), 24), Created: int64(n),
			Attrs: subnet.LeaseAttrs{BackendType: "wireguard", PublicIP: netip.AddrFrom4([4]byte{192, 168, 1, byte(n)}), BackendData: json.RawMessage(data)}}
	}
	var r Result
	for _, l := range []subnet.Lease{
		lease(2, `{"PublicKey":"`+good.String()+`","Port":51900}`),
		lease(3, `{"PublicKey":"`+other.String()+`"}`),
		lease(4, `{"PublicKey":"not a key","Port":51820}`),
		lease(5, `{"PublicKey":"`+good.String()+`","Port":70000}`),
		lease(6, `{"PublicKey":"`+good.String()+`","Port":51820}`),
		lease(7, `{"PublicKey":"`+priv.PublicKey().String()+`","Port":51820}`),
		lease(8, `{"PublicKey":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=","Port":51820}`),
	} {
		s.Put(l, &r)
	}
	codes := map[string]string{}
	for _, sk := range r.Skipped {
		codes[sk.Key] = sk.Code
	}
	want := map[string]string{"10.42.4.0-24": SkipBadData, "10.42.5.0-24": SkipBadData, "10.42.6.0-24": SkipDuplicateKey,
		"10.42.7.0-24": SkipDuplicateKey, "10.42.8.0-24": SkipBadData}
	if !reflect.DeepEqual(codes, want) {
		t.Errorf("skipped %v, want %v", codes, want)
	}
	peers := map[string]Peer{}
	for k, p := range s.State().Peers.All() {
		peers[k] = p
	}
	if p := peers["10.42.2.0-24"]; p.WGKey() != good || p.WireGuard.Endpoint.Port() != 51900 {
		t.Errorf("peer 2: %+v", p)
	}
	if p := peers["10.42.3.0-24"]; p.WGKey() != other || p.WireGuard.Endpoint.Port() != 51820 {
		t.Errorf("peer 3 (no port): %+v", p)
	}
	if len(peers) != 2 {
		t.Errorf("programmed %d peers, want 2: %v", len(peers), peers)
	}
	if wg := s.State().WireGuard; wg == nil || wg.Name != "flannel-wg" || wg.ListenPort != 51820 || wg.Keepalive != 25*time.Second || wg.MTU != 1420 {
		t.Errorf("device %+v", wg)
	}
}

// TestWireGuardCheck: a plane without the single-tunnel modes with IPv6 (a plane may lack
// them) refuses them where IPv6 is on, takes them in an IPv4-only network, and refuses one
// port for both devices in separate mode.
func TestWireGuardCheck(t *testing.T) {
	caps := Capabilities{OS: "Linux", WireGuard: WireGuardCapabilities{Has: Feature{Has: true}, IPv6: Feature{Has: true},
		SingleTunnelDualStack: Feature{Why: "not yet"}}}
	const dual = `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00::/56"`
	for _, tc := range []struct {
		conf, key string // key: the one refused; "" accepted
	}{
		{`{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","Mode":"auto"}}`, ""},
		{`{"Network":"10.244.0.0/16","Backend":{"Type":"wireguard","Mode":"ipv6"}}`, ""},
		{`{` + dual + `,"Backend":{"Type":"wireguard"}}`, ""},
		{`{` + dual + `,"Backend":{"Type":"wireguard","Mode":"auto"}}`, "Backend.Mode"},
		{`{` + dual + `,"Backend":{"Type":"wireguard","ListenPortV6":51820}}`, "Backend.ListenPortV6"},
	} {
		cfg, err := subnet.ParseConfig([]byte(tc.conf))
		if err != nil {
			t.Fatal(err)
		}
		err = caps.Check(cfg)
		var ce *subnet.ConfigError
		if tc.key == "" && err != nil || tc.key != "" && (!errors.As(err, &ce) || ce.Key != tc.key) {
			t.Errorf("%s: %v, want %q refused (none: accepted)", tc.conf, err, tc.key)
		}
	}
}

// TestWireGuardSingleTunnelEndpoints: a lease as flanneld publishes it in a dual-stack network
// (one key; BackendData's port 51820, BackendV6Data's 51821) is dialled, by both families'
// backends, where each mode says: each half at its own port in separate mode; in the
// single-tunnel modes at one address, on BackendData's port — the one the peer's single
// device listens on. The node's own lease publishes its device's port in both halves.
func TestWireGuardSingleTunnelEndpoints(t *testing.T) {
	priv := Key{0, 7}
	peerKey := Key{0, 8}.PublicKey()
	ep := netip.MustParseAddrPort
	for _, tc := range []struct {
		mode         string
		peer4, node6 string // the peer's public IPv4 address, the node's public IPv6 one
		want4, want6 netip.AddrPort
		dev6         string
		ownPort6     uint16
	}{
		{"separate", "192.0.2.5", "2001:db8::1", ep("192.0.2.5:51820"), ep("[2001:db8::5]:51821"), "flannel-wg-v6", 51821},
		{"ipv4", "192.0.2.5", "2001:db8::1", ep("192.0.2.5:51820"), ep("192.0.2.5:51820"), "flannel-wg", 51820},
		{"ipv6", "192.0.2.5", "2001:db8::1", ep("[2001:db8::5]:51820"), ep("[2001:db8::5]:51820"), "flannel-wg", 51820},
		// auto: IPv4 unless the peer's is private while its IPv6 address and the node's are public.
		{"auto", "192.0.2.5", "2001:db8::1", ep("192.0.2.5:51820"), ep("192.0.2.5:51820"), "flannel-wg", 51820},
		{"auto", "10.0.0.5", "2001:db8::1", ep("[2001:db8::5]:51820"), ep("[2001:db8::5]:51820"), "flannel-wg", 51820},
		{"auto", "10.0.0.5", "fd00::1", ep("10.0.0.5:51820"), ep("10.0.0.5:51820"), "flannel-wg", 51820},
	} {
		t.Run(tc.mode+" "+tc.peer4+" "+tc.node6, func(t *testing.T) {
			cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.42.0.0/16","EnableIPv6":true,"IPv6Network":"fd42::/56",` +
				`"Backend":{"Type":"wireguard","Mode":"` + tc.mode + `"}}`))
			if err != nil {
				t.Fatal(err)
			}
			node := Node{Underlay: "eth0", Addr: netip.MustParseAddr("10.0.0.1"), PublicIP: netip.MustParseAddr("10.0.0.1"),
				Addr6: netip.MustParseAddr(tc.node6), PublicIPv6: netip.MustParseAddr(tc.node6), MTU: 1500, WireGuardKey: priv}
			caps := Capabilities{WireGuard: WireGuardCapabilities{Has: Feature{Has: true}, IPv6: Feature{Has: true}, SingleTunnelDualStack: Feature{Has: true}}}
			if err := caps.Check(cfg); err != nil {
				t.Fatal(err)
			}
			own := subnet.Lease{Subnet: netip.MustParsePrefix("10.42.1.0/24"), IPv6Subnet: netip.MustParsePrefix("fd42:0:0:1::/64"), Created: 1}
			peer := subnet.Lease{Subnet: netip.MustParsePrefix("10.42.2.0/24"), IPv6Subnet: netip.MustParsePrefix("fd42:0:0:2::/64"), Created: 2,
				Attrs: subnet.LeaseAttrs{BackendType: "wireguard", PublicIP: netip.MustParseAddr(tc.peer4), PublicIPv6: netip.MustParseAddr("2001:db8::5"),
					BackendData:   json.RawMessage(`{"PublicKey":"` + peerKey.String() + `","Port":51820}`),
					BackendV6Data: json.RawMessage(`{"PublicKey":"` + peerKey.String() + `","Port":51821}`)}}
			got := map[Family]netip.AddrPort{}
			for _, f := range []Family{IPv4, IPv6} {
				b, err := NewFor(cfg, node, caps, f)
				if err != nil {
					t.Fatal(err)
				}
				b.AddAttrs(&own.Attrs, MAC{})
				s := NewSet(b, own, false)
				var r Result
				s.Put(peer, &r)
				for _, p := range s.State().Peers.All() {
					got[f] = p.WireGuard.Endpoint
				}
				if f == IPv6 {
					if wg := s.State().WireGuard; wg.Name != tc.dev6 || wg.ListenPort != tc.ownPort6 {
						t.Errorf("IPv6 device %s port %d, want %s port %d", wg.Name, wg.ListenPort, tc.dev6, tc.ownPort6)
					}
				}
			}
			if got[IPv4] != tc.want4 || got[IPv6] != tc.want6 {
				t.Errorf("endpoints IPv4 %v IPv6 %v, want %v and %v", got[IPv4], got[IPv6], tc.want4, tc.want6)
			}
			if d, err := DecodeWireGuardData(own.Attrs.BackendV6Data); err != nil || d.Port != tc.ownPort6 {
				t.Errorf("own BackendV6Data %s, want port %d", own.Attrs.BackendV6Data, tc.ownPort6)
			}
		})
	}
}
