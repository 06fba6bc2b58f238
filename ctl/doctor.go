package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
)

// Results of a check.
const (
	resultOK   = "ok"
	resultWarn = "warn" // worth knowing, not this node's fault: does not fail the doctor
	resultFail = "fail"
)

// Finding is one result of the doctor: what it found and, for a problem, what to do.
type Finding struct {
	Check  string `json:"check"`
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

// Kernel is the node's data plane compared with what the leases ask for, in a form every
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

// doctorFlags are weftctl doctor's own flags.
type doctorFlags struct {
	addr       string
	subnetFile string
	iface      string
	publicIP   string
}

func runDoctor(ctx context.Context, args []string, out io.Writer) error {
	var c common
	var ds datastoreFlags
	var f doctorFlags
	if err := parse(newDoctorFlagSet(&c, &ds, &f), args, out, &c); err != nil {
		return err
	}
	if err := checkAddr(f.addr); err != nil {
		return usageError{err}
	}
	if err := doctorSupported(); err != nil {
		return err
	}
	store, err := ds.open()
	if err != nil {
		return err
	}
	defer store.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()

	n := gather(ctx, store, f)
	if exp, err := expect(n); err == nil {
		n.kernel, n.kernelErr = inspectKernel(exp.state)
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

func newDoctorFlagSet(c *common, ds *datastoreFlags, f *doctorFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("weftctl doctor", flag.ContinueOnError)
	c.addFlags(fs)
	ds.addFlags(fs)
	fs.StringVar(&f.addr, "addr", weftdAddr(os.LookupEnv), "weftd's health address, host:port (its --healthz-ip and --healthz-port)")
	fs.StringVar(&f.subnetFile, "subnet-file", subnet.DefaultEnvFile, "the subnet.env weftd writes")
	fs.StringVar(&f.iface, "iface", "", "weftd's --iface: name or address, or a comma-separated list tried in order (default: what weftd reports, else the interface holding a lease's public IP)")
	fs.StringVar(&f.publicIP, "public-ip", "", "weftd's --public-ip, when it has one")
	return fs
}

// node is what the doctor found out about this node, before judging it.
type node struct {
	addr      string
	readyCode int
	readyBody string
	readyErr  error
	status    *status.Node // nil when weftd did not answer

	cfg      *subnet.Config
	entries  []Entry
	storeErr error

	subnetFile string
	env        subnet.Env
	envErr     error

	ext    netif.External
	extErr error

	kernel    *Kernel // nil when it could not be inspected
	kernelErr error
}

// gather asks weftd, the datastore, subnet.env and the interfaces; every failure is kept
// for diagnose to explain.
func gather(ctx context.Context, store datastore, f doctorFlags) node {
	n := node{addr: f.addr, subnetFile: f.subnetFile}
	var body []byte
	n.readyCode, body, n.readyErr = get(ctx, f.addr, "/readyz")
	n.readyBody = strings.TrimSpace(string(body))
	if n.readyErr == nil {
		if st, err := fetchStatus(ctx, f.addr); err == nil {
			n.status = &st
		}
	}
	if n.cfg, n.storeErr = store.Config(ctx); n.storeErr == nil {
		n.entries, n.storeErr = store.Leases(ctx)
	}
	n.env, n.envErr = subnet.ReadEnv(f.subnetFile)
	ifs, err := netif.List()
	if err != nil {
		n.extErr = err
	} else if n.storeErr == nil {
		n.ext, n.extErr = findExternal(ifs, f.iface, f.publicIP, n.status, validLeases(n.entries))
	} else {
		n.extErr = errors.New("not looked for: the leases are needed to tell which interface is weftd's")
	}
	return n
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

// findExternal finds weftd's external interface: --iface, else the one weftd reports, else
// the one holding the public IP of a lease (weftd may be down: that is when a doctor is
// needed most).
func findExternal(ifs []netif.Interface, iface, publicIP string, st *status.Node, leases []subnet.Lease) (netif.External, error) {
	var pub netip.Addr
	if publicIP != "" {
		a, err := netip.ParseAddr(publicIP)
		if err != nil || !a.Is4() {
			return netif.External{}, fmt.Errorf("--public-ip=%q: not an IPv4 address", publicIP)
		}
		pub = a
	}
	holds := func(i netif.Interface, a netip.Addr) bool {
		return slices.ContainsFunc(i.Prefix, func(p netip.Prefix) bool { return p.Addr() == a })
	}
	var ext netif.External
	pick := func(i netif.Interface, addr netip.Addr) {
		ext = netif.External{Name: i.Name, MTU: i.MTU, Addr: addr, Connected: netif.Connected(i)}
		for _, p := range i.Prefix {
			if !ext.Addr.IsValid() && p.Addr().Is4() && p.Addr().IsGlobalUnicast() {
				ext.Addr = p.Addr()
			}
		}
	}
	switch {
	case iface != "" || st != nil && st.Interface != "":
		// weftd's --iface is a list tried in order; the first that exists is the one.
		found := false
		for _, name := range strings.Split(iface, ",") {
			var addr netip.Addr
			if name = strings.TrimSpace(name); name == "" {
				continue
			} else if a, err := netip.ParseAddr(name); err == nil {
				addr = a
			}
			if i := slices.IndexFunc(ifs, func(i netif.Interface) bool { return i.Name == name || addr.IsValid() && holds(i, addr) }); i >= 0 {
				pick(ifs[i], addr)
				found = true
				break
			}
		}
		if !found && iface != "" {
			return netif.External{}, fmt.Errorf("--iface=%s: no such interface on this node", iface)
		}
		if !found {
			addr, _ := netip.ParseAddr(st.Address)
			i := slices.IndexFunc(ifs, func(i netif.Interface) bool { return i.Name == st.Interface })
			if i < 0 {
				return netif.External{}, fmt.Errorf("weftd's interface %s is not on this node: is --addr this node's weftd?", st.Interface)
			}
			pick(ifs[i], addr)
		}
		if !pub.IsValid() && st != nil {
			pub, _ = netip.ParseAddr(st.PublicIP)
		}
	default:
		var found []string
		for _, l := range leases {
			if pub.IsValid() && l.Attrs.PublicIP != pub {
				continue
			}
			for _, i := range ifs {
				if holds(i, l.Attrs.PublicIP) {
					found = append(found, i.Name+" "+l.Attrs.PublicIP.String())
					pick(i, l.Attrs.PublicIP)
				}
			}
		}
		switch {
		case len(found) == 0 && pub.IsValid():
			return netif.External{}, fmt.Errorf("no lease carries --public-ip=%s, and weftd does not answer: give --iface", pub)
		case len(found) == 0:
			return netif.External{}, errors.New("no lease carries an address of this node, and weftd does not answer: give --iface (and --public-ip behind NAT)")
		case len(found) > 1:
			return netif.External{}, fmt.Errorf("leases carry several addresses of this node (%s): give --iface", strings.Join(found, ", "))
		}
	}
	if !ext.Addr.IsValid() {
		return netif.External{}, fmt.Errorf("interface %s has no IPv4 address", ext.Name)
	}
	ext.PublicIP = ext.Addr
	if pub.IsValid() {
		ext.PublicIP = pub
	}
	return ext, nil
}

// expectation is what the node should look like, from the config and the leases.
type expectation struct {
	own     subnet.Lease
	sharing []string // keys of other leases with the node's public IP
	state   *backend.State
	skipped []backend.Skipped
	mtu     int
	mtuWhy  string
}

// expect computes the node's desired state as weftd does, with the backend package.
func expect(n node) (expectation, error) {
	switch {
	case n.storeErr != nil:
		return expectation{}, n.storeErr
	case n.extErr != nil:
		return expectation{}, n.extErr
	}
	leases := validLeases(n.entries)
	var e expectation
	found := false
	for _, l := range leases {
		if l.Attrs.PublicIP != n.ext.PublicIP {
			continue
		}
		// Of several, the one subnet.env names is the node's; the others are stale.
		if !found || n.envErr == nil && l.Subnet == n.env.Subnet.Masked() {
			if found {
				e.sharing = append(e.sharing, e.own.Key())
			}
			e.own, found = l, true
			continue
		}
		e.sharing = append(e.sharing, l.Key())
	}
	if !found {
		return expectation{}, fmt.Errorf("no lease carries this node's public IP %s", n.ext.PublicIP)
	}
	cfg, ext := n.cfg, n.ext
	b, err := backend.New(cfg, backend.Node{Underlay: ext.Name, Addr: ext.Addr, MTU: ext.MTU, Connected: ext.Connected, PublicIP: ext.PublicIP}, runtime.GOOS)
	if err != nil {
		return expectation{}, err
	}
	e.state, e.skipped = backend.Desired(b, e.own, leases, false)
	e.mtu, e.mtuWhy = b.MTU(), ext.Name+"'s MTU"
	if e.state.Device != nil {
		e.mtuWhy = fmt.Sprintf("%s's MTU %d less 50 for VXLAN", ext.Name, ext.MTU)
		if cfg.Backend.MTU > 0 {
			e.mtuWhy = fmt.Sprintf("Backend.MTU %d of the network config less 50 for VXLAN", cfg.Backend.MTU)
		}
	}
	return e, nil
}

// diagnose judges what gather found. It is pure, so every check is tested on made-up nodes.
func diagnose(n node) DoctorReport {
	var fs []Finding
	add := func(check, result, what, fix string) {
		fs = append(fs, Finding{Check: check, Result: result, What: what, Fix: fix})
	}
	running := n.readyErr == nil

	switch {
	case n.readyErr != nil:
		add("weftd", resultFail, "no answer: "+n.readyErr.Error(),
			"start weftd (systemctl start weftd, or look at its pod); if it runs, give --addr its --healthz-ip:--healthz-port")
	case n.readyCode != http.StatusOK:
		add("weftd", resultFail, fmt.Sprintf("not ready (%d): %s", n.readyCode, n.readyBody),
			fmt.Sprintf("weftctl status --addr=%s and weftd's log say more: readiness needs a lease, subnet.env, a reachable datastore and a converged data plane", n.addr))
	default:
		add("weftd", resultOK, fmt.Sprintf("ready (http://%s/readyz)", n.addr), "")
	}

	if n.storeErr != nil {
		add("datastore", resultFail, n.storeErr.Error(),
			"check --etcd-endpoints, --etcd-prefix and the TLS and user flags: they must be weftd's")
		return report("", fs)
	}
	valid := 0
	for _, e := range n.entries {
		if e.Err != nil {
			add("datastore", resultWarn, fmt.Sprintf("unreadable lease %s: %v", e.Key, e.Err),
				"every node skips it; correct or delete the key (etcdctl del "+e.Key+")")
			continue
		}
		valid++
	}
	add("datastore", resultOK, fmt.Sprintf("network %s, backend %s, %d leases", n.cfg.Network, n.cfg.Backend.Type, valid), "")
	// The checks below are IPv4's; the IPv6 half of a network is not diagnosed (yet).
	switch {
	case !n.cfg.EnableIPv4:
		add("network", resultWarn, "an IPv6-only network: weftctl doctor checks IPv4 networks only",
			"weftctl status shows weftd's own view of its lease and every peer's IPv6 half")
		return report("", fs)
	case n.cfg.EnableIPv6:
		add("network", resultWarn, fmt.Sprintf("a dual-stack network: only its IPv4 half is checked, not %s", n.cfg.IPv6Network),
			"weftctl status lists the peers' IPv6 halves as weftd programs them")
	}

	if n.extErr != nil {
		add("interface", resultFail, n.extErr.Error(), "give --iface as weftd's (and --public-ip if it has one)")
		return report("", fs)
	}
	ext := n.ext
	ifDesc := fmt.Sprintf("%s %s MTU %d", ext.Name, ext.Addr, ext.MTU)
	if ext.PublicIP != ext.Addr {
		ifDesc += ", public IP " + ext.PublicIP.String()
	}
	add("interface", resultOK, ifDesc, "")

	e, err := expect(n)
	if err != nil {
		fix := "start weftd: it acquires a lease; if it runs, weftctl status and its log say why it has none"
		if running {
			fix = "weftd runs but has no lease with this public IP: check --iface/--public-ip against weftd's, and weftd's log"
		}
		add("lease", resultFail, err.Error(), fix)
		return report(ifDesc, fs)
	}
	nodeDesc := fmt.Sprintf("%s, lease %s, backend %s", ifDesc, e.own.Subnet, n.cfg.Backend.Type)
	diagnoseLease(n, e, add)
	diagnoseEnv(n, e, add)
	diagnoseKernel(n, e, running, add)
	for _, s := range e.skipped {
		add("peers", resultWarn, fmt.Sprintf("lease %s skipped: %s", s.Key, s.Reason),
			"another node publishes it: fix that node, or delete the lease if the node is gone")
	}
	add("peers", resultOK, fmt.Sprintf("%d to program, %d skipped", e.state.Peers.Len(), len(e.skipped)), "")
	return report(nodeDesc, fs)
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

type addFunc func(check, result, what, fix string)

func diagnoseLease(n node, e expectation, add addFunc) {
	ok := true
	if len(e.sharing) > 0 {
		ok = false
		add("lease", resultFail, fmt.Sprintf("other leases carry this node's public IP %s too: %s", n.ext.PublicIP, strings.Join(e.sharing, ", ")),
			fmt.Sprintf("delete the stale ones (the node's own is %s, as in subnet.env): peers route only one of them", e.own.Key()))
	}
	if t := e.own.Attrs.BackendType; t != n.cfg.Backend.Type {
		ok = false
		add("lease", resultFail, fmt.Sprintf("lease %s publishes backend %q, the network config says %q", e.own.Key(), t, n.cfg.Backend.Type),
			"restart weftd: it publishes the configured backend")
	}
	if d := n.kernelDevice(); d != nil && !d.Missing && n.cfg.Backend.Type == subnet.BackendVXLAN {
		data, err := backend.DecodeVXLANData(e.own.Attrs.BackendData)
		switch {
		case err != nil:
			ok = false
			add("lease", resultFail, fmt.Sprintf("lease %s: %v", e.own.Key(), err), "restart weftd: it publishes its VTEP with its lease")
		case data.VtepMAC.String() != d.MAC:
			ok = false
			add("lease", resultFail, fmt.Sprintf("lease %s publishes VtepMAC %s, but %s has MAC %s: peers send to a MAC this node does not have", e.own.Key(), data.VtepMAC, d.Name, d.MAC),
				"restart weftd: it publishes the device's MAC")
		case data.VNI != e.state.Device.VNI:
			ok = false
			add("lease", resultFail, fmt.Sprintf("lease %s publishes VNI %d, the config says %d", e.own.Key(), data.VNI, e.state.Device.VNI),
				"restart weftd: it publishes the configured VNI")
		}
	}
	if ok {
		what := e.own.Subnet.String() + " for public IP " + n.ext.PublicIP.String()
		if !e.own.Expiration.IsZero() {
			what += ", expires " + expires(&e.own.Expiration, time.Now())
		}
		add("lease", resultOK, what, "")
	}
}

func (n node) kernelDevice() *Device {
	if n.kernel == nil {
		return nil
	}
	return n.kernel.Device
}

func diagnoseEnv(n node, e expectation, add addFunc) {
	const rewrite = "restart weftd: it rewrites subnet.env; pods created meanwhile keep what they got until they are recreated"
	if n.envErr != nil {
		add("subnet.env", resultFail, n.envErr.Error(),
			"weftd writes it once it holds a lease: start weftd, and check that --subnet-file is weftd's")
	} else {
		ok := true
		if n.env.Network != n.cfg.Network {
			ok = false
			add("subnet.env", resultFail, fmt.Sprintf("%s: FLANNEL_NETWORK=%s, the network config says %s", n.subnetFile, prefixString(n.env.Network), n.cfg.Network), rewrite)
		}
		if got := n.env.Subnet.Masked(); got != e.own.Subnet {
			ok = false
			add("subnet.env", resultFail, fmt.Sprintf("%s: FLANNEL_SUBNET=%s, but this node's lease is %s: new pods get addresses no peer routes here",
				n.subnetFile, prefixString(n.env.Subnet), e.own.Subnet), rewrite)
		}
		if ok {
			add("subnet.env", resultOK, fmt.Sprintf("%s: FLANNEL_NETWORK=%s FLANNEL_SUBNET=%s", n.subnetFile, n.env.Network, n.env.Subnet), "")
		}
	}

	ok := true
	if n.envErr == nil && n.env.MTU != e.mtu {
		ok = false
		add("mtu", resultFail, fmt.Sprintf("FLANNEL_MTU=%d, want %d (%s)", n.env.MTU, e.mtu, e.mtuWhy), rewrite)
	}
	if d := n.kernelDevice(); d != nil && !d.Missing && d.MTU != e.mtu {
		ok = false
		add("mtu", resultFail, fmt.Sprintf("%s has MTU %d, want %d (%s)", d.Name, d.MTU, e.mtu, e.mtuWhy),
			fmt.Sprintf("restart weftd: it sets the MTU of the device it adopts (or: ip link set %s mtu %d)", d.Name, e.mtu))
	}
	if ok {
		add("mtu", resultOK, fmt.Sprintf("%d (%s)", e.mtu, e.mtuWhy), "")
	}
}

func diagnoseKernel(n node, e expectation, running bool, add addFunc) {
	if n.kernelErr != nil || n.kernel == nil {
		err := n.kernelErr
		if err == nil {
			err = errors.New("not inspected")
		}
		add("kernel", resultFail, fmt.Sprintf("reading the data plane: %v", err), "run weftctl doctor on the node, as root")
		return
	}
	if d := n.kernel.Device; d != nil {
		switch {
		case d.Missing:
			add("device", resultFail, d.Name+" does not exist: no traffic to or from peers' pods",
				"start or restart weftd: it creates it (with a new MAC, which it publishes)")
		case d.Incompatible != "":
			add("device", resultFail, fmt.Sprintf("%s does not fit the network config: %s", d.Name, d.Incompatible),
				"restart weftd: it replaces the device (traffic through it pauses for a moment)")
		case !d.Up:
			add("device", resultFail, d.Name+" is down: no traffic to or from peers' pods",
				fmt.Sprintf("ip link set %s up (weftd does it when it converges)", d.Name))
		default:
			v := e.state.Device
			port := fmt.Sprint(v.Port)
			if v.Port == 0 {
				port = "8472 (the kernel's default)"
			}
			add("device", resultOK, fmt.Sprintf("%s up, VNI %d, port %s, local %s, via %s", d.Name, v.VNI, port, v.Local, v.Underlay), "")
		}
	}
	fix := "start weftd: it converges at once, changing only what differs; or by hand: "
	if running {
		fix = "weftd runs, yet has not repaired this: another program may be rewriting it (see weftd's log); by hand: "
	}
	drifted := map[string]bool{}
	for _, d := range n.kernel.Drift {
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
		add(d.Kind, resultFail, what, fix+cmd)
	}
	w, _ := linux.WantOf(e.state, false) // the counts are the same with nexthop objects
	want := map[string]int{"route": len(w.Routes)}
	kinds := []string{"route"}
	if e.state.Device != nil {
		kinds = append(kinds, "neighbor", "fdb", "address")
		want["neighbor"], want["fdb"], want["address"] = len(w.Neighbors), len(w.FDB), len(w.Addrs)
	}
	for _, k := range kinds {
		if !drifted[k] {
			add(k, resultOK, fmt.Sprintf("%d as the leases say", want[k]), "")
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
		t.row(f.Check, res, f.What)
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
