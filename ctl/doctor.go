package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/wgkey"
)

// Results of a check.
const (
	resultOK   = "ok"
	resultWarn = "warn" // worth knowing, not this node's fault: does not fail the doctor
	resultFail = "fail"
)

// Finding is one result of the doctor: what it found and, for a problem, what to do.
type Finding struct {
	Check string `json:"check"`
	// Family is "IPv6" for a check of the IPv6 half of the node (its device, routes, ...),
	// empty for the IPv4 half and for the checks of the node as a whole.
	Family string `json:"family,omitempty"`
	Result string `json:"result"`
	What   string `json:"what"`
	Fix    string `json:"fix,omitempty"`
}

// DoctorReport is what weftctl doctor prints.
type DoctorReport struct {
	Node     string    `json:"node"`
	Problems int       `json:"problems"`
	Findings []Finding `json:"findings"`
}

// Kernel is one family's data plane compared with what the leases ask for, in a form every
// OS can hold (only Linux fills it).
type Kernel struct {
	Device *Device `json:"device,omitempty"` // nil for host-gw
	Drift  []Drift `json:"drift,omitempty"`
}

// Device is the overlay device as found.
type Device struct {
	Name         string `json:"name"`
	Missing      bool   `json:"missing,omitempty"`
	Up           bool   `json:"up"`
	MTU          int    `json:"mtu"`
	MAC          string `json:"mac,omitempty"`
	Incompatible string `json:"incompatible,omitempty"` // why weftd would replace it
}

// Drift is one entry weftd would write or delete, in ip(8) and bridge(8) syntax, so that a
// fix can be typed: Want is the entry it would set ("" to delete), Have the one it would
// overwrite or delete ("" when missing).
type Drift struct {
	Kind string `json:"kind"` // route, neighbor, fdb, address
	Want string `json:"want,omitempty"`
	Have string `json:"have,omitempty"`
}

// system is what the doctor asks of the OS, as weftd's main hands it to weftd: the data
// plane's capabilities and a read-only look at it, the interfaces, the default route and
// the route lookup.
type system struct {
	caps       backend.Capabilities
	interfaces func() ([]netif.Interface, error)
	defaultIf  func() (string, error)
	routeTo    func(netip.Addr) (string, netip.Addr, error) // nil where the OS has none
	// inspect compares one family's part of the data plane with st, read-only; blackhole is
	// --ip-blackhole-route.
	inspect func(st *backend.State, blackhole bool) (*Kernel, error)
}

// doctorFlags are weftd's flags the doctor reads: where the leases are, how weftd chooses
// its interface and public addresses, and what decides its subnet.env and routes (the
// DaemonSets' arguments among them, so that those can be handed to the doctor as they are).
func doctorFlags() []string {
	return append(datastoreFlags(), "iface", "iface-regex", "iface-can-reach", "public-ip", "public-ipv6",
		"subnet-file", "ip-masq", "ip-blackhole-route")
}

func runDoctor(ctx context.Context, args []string, out io.Writer) error {
	var c common
	cfg := daemon.DefaultConfig()
	var addr string
	if err := parse(newDoctorFlagSet(&c, &cfg, &addr), args, out, &c); err != nil {
		return err
	}
	if err := checkAddr(addr); err != nil {
		return usageError{err}
	}
	// As weftd takes it: from the environment, where a DaemonSet sets it.
	cfg.NodeName = os.Getenv("NODE_NAME")
	if cfg.KubeSubnetMgr && cfg.NodeName == "" {
		return usageError{errors.New("NODE_NAME: not set; with --kube-subnet-mgr the doctor checks the node of that Node object, as weftd runs for it")}
	}
	sys, err := thisSystem()
	if err != nil {
		return err
	}
	store, err := openStore(cfg)
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	n := gather(ctx, store, cfg, addr, sys)
	if e, err := expect(n); err == nil {
		n.kernel = map[backend.Family]*Kernel{}
		for _, fe := range e.fams {
			k, err := sys.inspect(fe.state, cfg.BlackholeRoute)
			if err != nil {
				n.kernelErr = fmt.Errorf("%s: %w", fe.fam(), err)
				break
			}
			n.kernel[fe.fam()] = k
		}
	}
	rep := diagnose(n)
	if c.output == "json" {
		err = writeJSON(out, rep)
	} else {
		err = writeDoctor(out, rep)
	}
	if err == nil && rep.Problems > 0 {
		err = errProblems
	}
	return err
}

// newDoctorFlagSet is weftctl doctor's command line: the common flags, weftd's that the
// doctor reads (into cfg), and --addr.
func newDoctorFlagSet(c *common, cfg *daemon.Config, addr *string) *flag.FlagSet {
	fs := flag.NewFlagSet("weftctl doctor", flag.ContinueOnError)
	c.addFlags(fs)
	c.addWeftdFlags(fs, cfg, doctorFlags()...)
	fs.StringVar(addr, "addr", weftdAddr(os.LookupEnv), "weftd's health address, host:port (its --healthz-ip and --healthz-port)")
	return fs
}

// node is what the doctor found out about this node, before judging it.
type node struct {
	addr      string
	readyCode int
	readyBody string
	readyErr  error
	status    *status.Node // nil when weftd did not answer

	kube     bool   // Kubernetes mode: the leases are Nodes'
	nodeName string // the Node of this node (Kubernetes mode)
	caps     backend.Capabilities
	ipMasq   bool

	cfg      *subnet.Config
	entries  []Entry
	storeErr error

	subnetFile string
	env        subnet.Env
	envErr     error

	ext    netif.External
	extVia string // whose choice ext is: weftd's flags, its /status, the default route
	extErr error

	kernel    map[backend.Family]*Kernel // by family; nil when it could not be inspected
	kernelErr error
}

// gather asks weftd, the datastore, subnet.env and the interfaces; every failure is kept
// for diagnose to explain.
func gather(ctx context.Context, store datastore, cfg daemon.Config, addr string, sys system) node {
	n := node{addr: addr, subnetFile: cfg.SubnetFile, kube: cfg.KubeSubnetMgr, nodeName: cfg.NodeName, caps: sys.caps, ipMasq: cfg.IPMasq}
	var body []byte
	n.readyCode, body, n.readyErr = get(ctx, addr, "/readyz")
	n.readyBody = strings.TrimSpace(string(body))
	if n.readyErr == nil {
		if st, err := fetchStatus(ctx, addr); err == nil {
			n.status = &st
		}
	}
	if n.cfg, n.storeErr = store.Config(ctx); n.storeErr == nil {
		n.entries, n.storeErr = store.Leases(ctx)
	}
	n.env, n.envErr = subnet.ReadEnv(cfg.SubnetFile)
	if n.storeErr != nil {
		n.extErr = errors.New("not looked for: the network config says which families it must carry")
		return n
	}
	v4, v6, err := store.NodePublicIPs(ctx)
	if err != nil {
		n.extErr = fmt.Errorf("reading the node's public IP annotations: %w", err)
		return n
	}
	cfg.UseNodePublicIPs(v4, v6, slog.New(slog.DiscardHandler))
	ifs, err := sys.interfaces()
	if err != nil {
		n.extErr = err
		return n
	}
	choice, via := interfaceChoice(cfg, n.cfg, n.status)
	choice.RouteTo = sys.routeTo
	n.ext, n.extErr = netif.Pick(choice, ifs, sys.defaultIf)
	n.extVia = via
	return n
}

// interfaceChoice is weftd's choice of its interface (daemon.Config.Choice) as the doctor
// can know it: with weftd's flags when it has them (its environment: run the doctor beside
// weftd), else with the interface and public addresses weftd reports on /status, else as
// weftd without those flags: the default route's interface. via says which.
func interfaceChoice(cfg daemon.Config, net *subnet.Config, st *status.Node) (netif.Choice, string) {
	via := "weftd's --iface"
	switch {
	case len(cfg.Ifaces) > 0 || len(cfg.IfaceRegexs) > 0 || cfg.IfaceCanReach != "":
	case st != nil && st.Interface != "":
		cfg.Ifaces, via = []string{st.Interface}, "weftd's /status"
	default:
		via = "the default route, as weftd without --iface"
	}
	if st != nil {
		// What weftd publishes, the node's annotations included.
		if st.PublicIP != "" {
			cfg.PublicIP = st.PublicIP
		}
		if st.PublicIPv6 != "" {
			cfg.PublicIPv6 = st.PublicIPv6
		}
	}
	return cfg.Choice(net, nil), via
}

func validLeases(entries []Entry) []subnet.Lease {
	var out []subnet.Lease
	for _, e := range entries {
		if e.Err == nil {
			out = append(out, e.Lease)
		}
	}
	return out
}

// expectation is what the node should look like, from the config and the leases, as weftd
// computes it.
type expectation struct {
	own     subnet.Lease
	sharing []string // keys of other leases with the node's public IP
	fams    []famExpectation
	mtu     int    // the pods'
	mtuWhy  string // how mtu follows from the interface or the config
	env     subnet.Env
}

// famExpectation is one family's part of an expectation.
type famExpectation struct {
	b       *backend.Backend
	state   *backend.State
	skipped []backend.Skipped
}

func (f famExpectation) fam() backend.Family { return f.b.Family() }

// expect computes the node's desired state with weftd's own functions: its backends
// (daemon.NewBackends, on this OS's data plane), the State of each family for its lease and
// the others (backend.Desired) and its subnet.env (daemon.Env).
func expect(n node) (expectation, error) {
	switch {
	case n.storeErr != nil:
		return expectation{}, n.storeErr
	case n.extErr != nil:
		return expectation{}, n.extErr
	}
	var e expectation
	leases := validLeases(n.entries)
	var err error
	if n.kube {
		e.own, err = n.ownNode()
	} else {
		e.own, e.sharing, err = n.ownByPublicIP(leases)
	}
	if err != nil {
		return expectation{}, err
	}
	var wgKey backend.Key
	if n.cfg.Backend.Type == subnet.BackendWireGuard {
		// The node's own key, as weftd reads it; weftctl makes none.
		if wgKey, err = wgkey.Read(wgkey.Path(os.LookupEnv)); err != nil {
			return expectation{}, err
		}
	}
	bs, mtu, err := daemon.NewBackends(n.cfg, n.ext, n.caps, wgKey)
	if err != nil {
		return expectation{}, err
	}
	e.mtu = mtu
	for _, b := range bs {
		st, skipped := backend.Desired(b, e.own, leases, n.ipMasq)
		e.fams = append(e.fams, famExpectation{b: b, state: st, skipped: skipped})
		if b.MTU() != mtu || e.mtuWhy != "" {
			continue
		}
		e.mtuWhy = n.ext.Name + "'s MTU"
		if o := b.Overhead(); o > 0 {
			over := ""
			if b.Family() == backend.IPv6 {
				over = " over IPv6"
			}
			tunnel := "VXLAN"
			if n.cfg.Backend.Type == subnet.BackendWireGuard {
				tunnel = "WireGuard"
			}
			e.mtuWhy = fmt.Sprintf("%s's MTU %d less %d for %s%s", n.ext.Name, n.ext.MTU, o, tunnel, over)
			if n.cfg.Backend.MTU > 0 {
				e.mtuWhy = fmt.Sprintf("Backend.MTU %d of the network config less %d for %s%s", n.cfg.Backend.MTU, o, tunnel, over)
			}
		}
	}
	e.env = daemon.Env(n.cfg, e.own, mtu, n.ipMasq)
	return e, nil
}

// ownNode is the lease of the node's Node (Kubernetes mode).
func (n node) ownNode() (subnet.Lease, error) {
	i := slices.IndexFunc(n.entries, func(e Entry) bool { return e.Key == n.nodeName })
	switch {
	case i < 0:
		return subnet.Lease{}, fmt.Errorf("the Node %s publishes no lease (it needs a podCIDR, and weftd's annotations)", n.nodeName)
	case n.entries[i].Err != nil:
		return subnet.Lease{}, fmt.Errorf("the lease of Node %s cannot be read: %w", n.nodeName, n.entries[i].Err)
	}
	return n.entries[i].Lease, nil
}

// ownByPublicIP is the lease that carries the node's public IP (of its first family), and
// the keys of the others that do too: of several, the one subnet.env names is the node's;
// the others are stale.
func (n node) ownByPublicIP(leases []subnet.Lease) (subnet.Lease, []string, error) {
	fam := backend.Families(n.cfg)[0]
	public, envSubnet := n.ext.PublicIP, n.env.Subnet.Masked()
	if fam == backend.IPv6 {
		public, envSubnet = n.ext.PublicIPv6, n.env.IPv6Subnet.Masked()
	}
	var own subnet.Lease
	var sharing []string
	found := false
	for _, l := range leases {
		ip := l.Attrs.PublicIP
		if fam == backend.IPv6 {
			ip = l.Attrs.PublicIPv6
		}
		if ip != public {
			continue
		}
		if !found || n.envErr == nil && fam.Subnet(l) == envSubnet {
			if found {
				sharing = append(sharing, own.Key())
			}
			own, found = l, true
			continue
		}
		sharing = append(sharing, l.Key())
	}
	if !found {
		return subnet.Lease{}, nil, fmt.Errorf("no lease carries this node's public %s address %s", fam, public)
	}
	return own, sharing, nil
}

// diagnose judges what gather found. It is pure, so every check is tested on made-up nodes.
func diagnose(n node) DoctorReport {
	var fs []Finding
	add := func(fam backend.Family, check, result, what, fix string) {
		f := Finding{Check: check, Result: result, What: what, Fix: fix}
		if fam == backend.IPv6 {
			f.Family = fam.String()
		}
		fs = append(fs, f)
	}
	running := n.readyErr == nil

	switch {
	case n.readyErr != nil:
		add(0, "weftd", resultFail, "no answer: "+n.readyErr.Error(),
			"start weftd (systemctl start weftd, or look at its pod); if it runs, give --addr its --healthz-ip:--healthz-port")
	case n.readyCode != http.StatusOK:
		add(0, "weftd", resultFail, fmt.Sprintf("not ready (%d): %s", n.readyCode, n.readyBody),
			fmt.Sprintf("weftctl status --addr=%s and weftd's log say more: readiness needs a lease, subnet.env, a reachable datastore and a converged data plane", n.addr))
	default:
		add(0, "weftd", resultOK, fmt.Sprintf("ready (http://%s/readyz)", n.addr), "")
	}

	if n.storeErr != nil {
		fix := "check --etcd-endpoints, --etcd-prefix and the TLS and user flags: they must be weftd's"
		if n.kube {
			fix = "check --kubeconfig-file (or the pod's service account), --kube-api-url and --net-config-path: they must be weftd's"
		}
		add(0, "datastore", resultFail, n.storeErr.Error(), fix)
		return report("", fs)
	}
	valid := 0
	for _, e := range n.entries {
		if e.Err != nil {
			fix := "every node skips it; correct or delete the key (etcdctl del " + e.Key + ")"
			if n.kube {
				fix = "every node skips it; correct the annotations of Node " + e.Key + " (kubectl describe node " + e.Key + ")"
			}
			add(0, "datastore", resultWarn, fmt.Sprintf("unreadable lease %s: %v", e.Key, e.Err), fix)
			continue
		}
		valid++
	}
	add(0, "datastore", resultOK, fmt.Sprintf("network %s, backend %s, %d leases", networks(n.cfg), n.cfg.Backend.Type, valid), "")

	if n.extErr != nil {
		add(0, "interface", resultFail, n.extErr.Error(), "give weftd's --iface (and its --public-ip and --public-ipv6, if it has them), or run the doctor with weftd's environment")
		return report("", fs)
	}
	ext := n.ext
	ifDesc := ext.Name
	for _, a := range []struct{ addr, public netip.Addr }{{ext.Addr, ext.PublicIP}, {ext.Addr6, ext.PublicIPv6}} {
		if a.addr.IsValid() {
			ifDesc += " " + a.addr.String()
			if a.public != a.addr {
				ifDesc += " (public " + a.public.String() + ")"
			}
		}
	}
	ifDesc += fmt.Sprintf(" MTU %d", ext.MTU)
	add(0, "interface", resultOK, ifDesc+", by "+n.extVia, "")

	e, err := expect(n)
	if err != nil {
		fix := "start weftd: it acquires a lease; if it runs, weftctl status and its log say why it has none"
		if running {
			fix = "weftd runs but has no lease with this public IP: check --iface/--public-ip against weftd's, and weftd's log"
		}
		add(0, "lease", resultFail, err.Error(), fix)
		return report(ifDesc, fs)
	}
	nodeDesc := fmt.Sprintf("%s, lease %s, backend %s", ifDesc, strings.TrimSpace(prefixString(e.own.Subnet)+" "+prefixString(e.own.IPv6Subnet)), n.cfg.Backend.Type)
	diagnoseLease(n, e, add)
	diagnoseEnv(n, e, add)
	for _, fe := range e.fams {
		diagnoseKernel(n, fe, running, add)
	}
	for _, fe := range e.fams {
		for _, s := range fe.skipped {
			add(fe.fam(), "peers", resultWarn, fmt.Sprintf("lease %s skipped: %s", s.Key, s.Reason),
				"another node publishes it: fix that node, or delete the lease if the node is gone")
		}
		add(fe.fam(), "peers", resultOK, fmt.Sprintf("%d to program, %d skipped", fe.state.Peers.Len(), len(fe.skipped)), "")
	}
	return report(nodeDesc, fs)
}

// networks are the config's cluster networks.
func networks(cfg *subnet.Config) string {
	var out []string
	for _, f := range backend.Families(cfg) {
		out = append(out, f.Network(cfg).String())
	}
	return strings.Join(out, " ")
}

func report(node string, fs []Finding) DoctorReport {
	r := DoctorReport{Node: node, Findings: fs}
	for _, f := range fs {
		if f.Result == resultFail {
			r.Problems++
		}
	}
	return r
}

type addFunc func(fam backend.Family, check, result, what, fix string)

func diagnoseLease(n node, e expectation, add addFunc) {
	ok := true
	if len(e.sharing) > 0 {
		ok = false
		add(0, "lease", resultFail, fmt.Sprintf("other leases carry this node's public IP too: %s", strings.Join(e.sharing, ", ")),
			fmt.Sprintf("delete the stale ones (the node's own is %s, as in subnet.env): peers route only one of them", e.own.Key()))
	}
	if t := e.own.Attrs.BackendType; t != n.cfg.Backend.Type {
		ok = false
		add(0, "lease", resultFail, fmt.Sprintf("lease %s publishes backend %q, the network config says %q", e.own.Key(), t, n.cfg.Backend.Type),
			"restart weftd: it publishes the configured backend")
	}
	var publics []string
	for _, fe := range e.fams {
		f := fe.fam()
		public, data := e.own.Attrs.PublicIP, e.own.Attrs.BackendData
		want := n.ext.PublicIP
		if f == backend.IPv6 {
			public, data, want = e.own.Attrs.PublicIPv6, e.own.Attrs.BackendV6Data, n.ext.PublicIPv6
		}
		publics = append(publics, want.String())
		if public != want {
			ok = false
			add(f, "lease", resultFail, fmt.Sprintf("lease %s publishes the public %s address %s, this node's is %s: peers send to the wrong address", e.own.Key(), f, public, want),
				"restart weftd: it publishes the node's public addresses (check --public-ip and --public-ipv6, or the node's public IP annotations)")
		}
		d := n.kernelDevice(f)
		if d == nil || d.Missing {
			continue
		}
		vx, err := backend.DecodeVXLANData(data)
		switch {
		case err != nil:
			ok = false
			add(f, "lease", resultFail, fmt.Sprintf("lease %s: %v", e.own.Key(), err), "restart weftd: it publishes its VTEP with its lease")
		case vx.VtepMAC.String() != d.MAC:
			ok = false
			add(f, "lease", resultFail, fmt.Sprintf("lease %s publishes VtepMAC %s, but %s has MAC %s: peers send to a MAC this node does not have", e.own.Key(), vx.VtepMAC, d.Name, d.MAC),
				"restart weftd: it publishes the device's MAC")
		case vx.VNI != fe.state.Device.VNI:
			ok = false
			add(f, "lease", resultFail, fmt.Sprintf("lease %s publishes VNI %d, the config says %d", e.own.Key(), vx.VNI, fe.state.Device.VNI),
				"restart weftd: it publishes the configured VNI")
		}
	}
	if ok {
		what := strings.TrimSpace(prefixString(e.own.Subnet)+" "+prefixString(e.own.IPv6Subnet)) + " for public IP " + strings.Join(publics, " ")
		if n.kube {
			what += ", Node " + n.nodeName
		}
		if !e.own.Expiration.IsZero() {
			what += ", expires " + expires(&e.own.Expiration, time.Now())
		}
		add(0, "lease", resultOK, what, "")
	}
}

// kernelDevice is the overlay device of family f as found, nil if none was looked at.
func (n node) kernelDevice(f backend.Family) *Device {
	if k := n.kernel[f]; k != nil {
		return k.Device
	}
	return nil
}

func diagnoseEnv(n node, e expectation, add addFunc) {
	const rewrite = "restart weftd: it rewrites subnet.env; pods created meanwhile keep what they got until they are recreated"
	if n.envErr != nil {
		add(0, "subnet.env", resultFail, n.envErr.Error(),
			"weftd writes it once it holds a lease: start weftd, and check that --subnet-file is weftd's")
	} else {
		ok := true
		for _, c := range []struct {
			key        string
			have, want netip.Prefix
			why        string
		}{
			{"FLANNEL_NETWORK", n.env.Network, e.env.Network, "the network config says %s"},
			{"FLANNEL_SUBNET", n.env.Subnet, e.env.Subnet, "but this node's lease is %s: new pods get addresses no peer routes here"},
			{"FLANNEL_IPV6_NETWORK", n.env.IPv6Network, e.env.IPv6Network, "the network config says %s"},
			{"FLANNEL_IPV6_SUBNET", n.env.IPv6Subnet, e.env.IPv6Subnet, "but this node's lease is %s: new pods get addresses no peer routes here"},
		} {
			if c.have == c.want {
				continue
			}
			ok = false
			want := "none"
			if c.want.IsValid() {
				want = c.want.Masked().String()
				if strings.HasSuffix(c.key, "NETWORK") {
					want = c.want.String()
				}
			}
			add(0, "subnet.env", resultFail, fmt.Sprintf("%s: %s=%s, %s", n.subnetFile, c.key, orDash(prefixString(c.have)), fmt.Sprintf(c.why, want)), rewrite)
		}
		if ok {
			what := n.subnetFile + ":"
			for _, kv := range []struct {
				key string
				p   netip.Prefix
			}{{"FLANNEL_NETWORK", n.env.Network}, {"FLANNEL_SUBNET", n.env.Subnet}, {"FLANNEL_IPV6_NETWORK", n.env.IPv6Network}, {"FLANNEL_IPV6_SUBNET", n.env.IPv6Subnet}} {
				if kv.p.IsValid() {
					what += " " + kv.key + "=" + kv.p.String()
				}
			}
			add(0, "subnet.env", resultOK, what, "")
		}
	}

	ok := true
	if n.envErr == nil && n.env.MTU != e.mtu {
		ok = false
		add(0, "mtu", resultFail, fmt.Sprintf("FLANNEL_MTU=%d, want %d (%s)", n.env.MTU, e.mtu, e.mtuWhy), rewrite)
	}
	for _, fe := range e.fams {
		if d := n.kernelDevice(fe.fam()); d != nil && !d.Missing && d.MTU != fe.b.MTU() {
			ok = false
			add(fe.fam(), "mtu", resultFail, fmt.Sprintf("%s has MTU %d, want %d (the interface's less %d for VXLAN)", d.Name, d.MTU, fe.b.MTU(), fe.b.Overhead()),
				fmt.Sprintf("restart weftd: it sets the MTU of the device it adopts (or: ip link set %s mtu %d)", d.Name, fe.b.MTU()))
		}
	}
	if ok {
		add(0, "mtu", resultOK, fmt.Sprintf("%d (%s)", e.mtu, e.mtuWhy), "")
	}
}

func diagnoseKernel(n node, fe famExpectation, running bool, add addFunc) {
	f := fe.fam()
	k := n.kernel[f]
	if n.kernelErr != nil || k == nil {
		err := n.kernelErr
		if err == nil {
			err = errors.New("not inspected")
		}
		add(f, "kernel", resultFail, fmt.Sprintf("reading the data plane: %v", err), "run weftctl doctor on the node, as root")
		return
	}
	if d := k.Device; d != nil {
		switch {
		case d.Missing:
			add(f, "device", resultFail, d.Name+" does not exist: no traffic to or from peers' pods",
				"start or restart weftd: it creates it (with a new MAC, which it publishes)")
		case d.Incompatible != "":
			add(f, "device", resultFail, fmt.Sprintf("%s does not fit the network config: %s", d.Name, d.Incompatible),
				"restart weftd: it replaces the device (traffic through it pauses for a moment)")
		case !d.Up:
			add(f, "device", resultFail, d.Name+" is down: no traffic to or from peers' pods",
				fmt.Sprintf("ip link set %s up (weftd does it when it converges)", d.Name))
		default:
			v := fe.state.Device
			port := fmt.Sprint(v.Port)
			if v.Port == 0 {
				port = fmt.Sprintf("%d (the default)", n.caps.Port(n.cfg.Backend))
			}
			add(f, "device", resultOK, fmt.Sprintf("%s up, VNI %d, port %s, local %s, via %s", d.Name, v.VNI, port, v.Local, v.Underlay), "")
		}
	}
	fix := "start weftd: it converges at once, changing only what differs; or by hand: "
	if running {
		fix = "weftd runs, yet has not repaired this: another program may be rewriting it (see weftd's log); by hand: "
	}
	drifted := map[string]bool{}
	for _, d := range k.Drift {
		drifted[d.Kind] = true
		var what, cmd string
		switch {
		case d.Have == "":
			what, cmd = "missing: "+d.Want, fixCommand(d.Kind, "replace", d.Want)
		case d.Want == "":
			what, cmd = "stale, no lease asks for it: "+d.Have, fixCommand(d.Kind, "del", d.Have)
		default:
			what, cmd = "wrong: "+d.Have+", want "+d.Want, fixCommand(d.Kind, "replace", d.Want)
		}
		add(f, d.Kind, resultFail, what, fix+cmd)
	}
	w, _ := linux.WantOf(fe.state, false) // the counts are the same with nexthop objects
	_, routes, neighbors, fdb := w.Entries()
	want := map[string]int{"route": len(routes)}
	kinds := []string{"route"}
	if fe.state.Device != nil {
		kinds = append(kinds, "neighbor", "fdb", "address")
		want["neighbor"], want["fdb"], want["address"] = len(neighbors), len(fdb), len(w.Addrs)
	}
	for _, kind := range kinds {
		if !drifted[kind] {
			add(f, kind, resultOK, fmt.Sprintf("%d as the leases say", want[kind]), "")
		}
	}
}

// fixCommand is the command that writes (op "replace") or deletes (op "del") an entry given
// in the syntax of Drift.
func fixCommand(kind, op, entry string) string {
	switch kind {
	case "route":
		return "ip route " + op + " " + entry
	case "nexthop":
		if op == "del" {
			id, _, _ := strings.Cut(entry, " via")
			return "ip nexthop del " + id
		}
		return "ip nexthop replace " + entry
	case "neighbor":
		if op == "replace" {
			return "ip neigh replace " + entry + " nud permanent"
		}
		return "ip neigh del " + entry
	case "fdb":
		if op == "replace" {
			return "bridge fdb replace " + entry + " self permanent"
		}
		return "bridge fdb del " + entry + " self"
	case "address":
		if op == "replace" {
			op = "add"
		}
		return "ip addr " + op + " " + entry
	}
	return entry
}

func addressText(dev string, p netip.Prefix) string { return p.String() + " dev " + dev }

func writeDoctor(out io.Writer, r DoctorReport) error {
	if r.Node != "" {
		if _, err := fmt.Fprintf(out, "node: %s\n\n", r.Node); err != nil {
			return fmt.Errorf("writing the report: %w", err)
		}
	}
	t := newTable(out)
	t.row("CHECK", "RESULT", "WHAT")
	for _, f := range r.Findings {
		res := f.Result
		if res == resultFail {
			res = "FAIL"
		}
		check := f.Check
		if f.Family != "" {
			check += " " + f.Family
		}
		t.row(check, res, f.What)
		if f.Fix != "" {
			t.row("", "", "fix: "+f.Fix)
		}
	}
	if err := t.flush(); err != nil {
		return err
	}
	var err error
	switch r.Problems {
	case 0:
		_, err = fmt.Fprintln(out, "\nno problems found")
	case 1:
		_, err = fmt.Fprintln(out, "\n1 problem found")
	default:
		_, err = fmt.Fprintf(out, "\n%d problems found\n", r.Problems)
	}
	if err != nil {
		return fmt.Errorf("writing the report: %w", err)
	}
	return nil
}
