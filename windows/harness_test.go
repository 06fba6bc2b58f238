package windows_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnstest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fakeClock is the time of a test: Sleep advances it at once.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
	return ctx.Err()
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

const (
	testBlip    = 3 * time.Second
	testAdapter = "Ethernet"
)

var hns10 = windows.Version{Major: 10, Minor: 0}

func mustConfig(t *testing.T, js string) *subnet.Config {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := windows.Capabilities().Check(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// winNode is a Windows node as weftd drives it: its HNS and host, the backend built from
// the config, the plane, and the Set of peer leases whose changes the plane is given. A
// restart is a new plane (and backend and Set) on the same HNS; a reboot also empties HNS of
// non-persistent networks.
type winNode struct {
	t     *testing.T
	cfg   *subnet.Config
	clock *fakeClock
	hns   *hnstest.HNS
	host  *hnstest.Host
	pcfg  windows.Config
	plane *windows.Plane
	b     *backend.Backend
	pub   netip.Addr
	own   subnet.Lease
	// set holds the peer leases; nil until the first convergence after an acquisition,
	// which is a full Apply, as the daemon's first one is.
	set *backend.Set
	// underlay is the interface holding the public IP when weftd started, as the daemon
	// picks it: "vEthernet (Ethernet)" once HNS made a vSwitch.
	underlay string
}

func newWinNode(t *testing.T, cfg *subnet.Config, pub string, v windows.Version, pcfg windows.Config, opts ...func(*hnstest.Options)) *winNode {
	n := &winNode{t: t, cfg: cfg, clock: newClock(), pub: netip.MustParseAddr(pub), pcfg: pcfg}
	n.host = hnstest.NewHost(windows.Interface{Index: 4, Name: testAdapter, Prefixes: []netip.Prefix{netip.PrefixFrom(n.pub, 24)}})
	o := hnstest.Options{Version: v, ManagementIP: n.pub, Blip: testBlip, Now: n.clock.Now, Host: n.host}
	for _, f := range opts {
		f(&o)
	}
	n.hns = hnstest.New(o)
	n.restart()
	return n
}

// restart is a new weftd process: it picks the interface, builds its backend and plane.
func (n *winNode) restart() {
	n.t.Helper()
	ifs, _ := n.host.Interfaces()
	for _, i := range ifs {
		if slices.ContainsFunc(i.Prefixes, func(p netip.Prefix) bool { return p.Addr() == n.pub }) {
			n.underlay = i.Name
		}
	}
	c := n.pcfg
	if c.Sleep == nil {
		c.Sleep = n.clock.Sleep
	}
	n.plane = windows.New(n.hns, n.host, c, testLogger(n.t))
	node := backend.Node{Underlay: n.underlay, Addr: n.pub, MTU: 1500, PublicIP: n.pub,
		Connected: []netip.Prefix{netip.PrefixFrom(n.pub, 24).Masked()}}
	b, err := backend.NewFor(n.cfg, node, windows.Capabilities(), backend.IPv4)
	if err != nil {
		n.t.Fatal(err)
	}
	n.b, n.set = b, nil
	n.host.ResetCalls()
	n.hns.ResetCalls()
}

// acquire runs the plane's Prepare as the lease acquisition does for subnet sn, and
// returns the lease it would publish.
func (n *winNode) acquire(sn string) (subnet.Lease, error) {
	p := netip.MustParsePrefix(sn)
	mac, err := n.plane.Prepare(n.t.Context(), n.b.State(p, false))
	if err != nil {
		return subnet.Lease{}, err
	}
	n.own = subnet.Lease{Subnet: p, Attrs: n.b.Attrs(mac)}
	n.set = nil
	return n.own, nil
}

func (n *winNode) mustAcquire(sn string) subnet.Lease {
	n.t.Helper()
	l, err := n.acquire(sn)
	if err != nil {
		n.t.Fatalf("acquire %s: %v", sn, err)
	}
	return l
}

// converge makes the Set hold exactly peers and applies what changed: all of it the
// first time (a full Apply), then only the changed peers.
func (n *winNode) converge(peers []subnet.Lease) (backend.Changes, error) {
	if n.set == nil {
		return n.full(peers)
	}
	var r backend.Result
	keep := map[string]bool{}
	for _, l := range peers {
		keep[l.Key()] = true
	}
	for _, p := range n.set.Peers() {
		if !keep[p.Key] {
			n.set.Remove(p.Key, &r)
		}
	}
	for _, l := range peers {
		n.set.Put(l, &r)
	}
	return n.declared(n.plane.Apply(n.t.Context(), n.set.State(), backend.Update{Peers: r.Changes}))
}

// full applies peers in full, from a new Set: the daemon's start, resync or drift repair.
func (n *winNode) full(peers []subnet.Lease) (backend.Changes, error) {
	n.set = backend.NewSet(n.b, n.own, false)
	var r backend.Result
	for _, l := range peers {
		n.set.Put(l, &r)
	}
	n.logSkipped(r.Skipped)
	return n.declared(n.plane.Apply(n.t.Context(), n.set.State(), backend.Update{Full: true}))
}

// declared checks that every kind an Apply counted is one the plane's Capabilities list, so
// that the daemon's counters of it start at zero.
func (n *winNode) declared(ch backend.Changes, err error) (backend.Changes, error) {
	n.t.Helper()
	for k := range ch {
		if !slices.Contains(n.plane.Capabilities().ChangeKinds, k) {
			n.t.Errorf("Apply counted %q, which Capabilities().ChangeKinds %v lacks", k, n.plane.Capabilities().ChangeKinds)
		}
	}
	return ch, err
}

func (n *winNode) logSkipped(skipped []backend.Skipped) {
	for _, s := range skipped {
		n.t.Logf("skipped %s: %s", s.Key, s.Reason)
	}
}

// mustConverge converges and says what changed ("" for nothing).
func (n *winNode) mustConverge(peers []subnet.Lease) string {
	n.t.Helper()
	ch, err := n.converge(peers)
	if err != nil {
		n.t.Fatalf("converge: %v", err)
	}
	return ch.String()
}

func (n *winNode) vtepMAC() backend.MAC {
	n.t.Helper()
	d, err := backend.DecodeVXLANData(n.own.Attrs.BackendData)
	if err != nil {
		n.t.Fatal(err)
	}
	return d.VtepMAC
}

// network is the node's HNS network called name.
func (n *winNode) network(name string) *windows.HostComputeNetwork {
	n.t.Helper()
	net, err := n.hns.NetworkByName(name)
	if err != nil {
		n.t.Fatal(err)
	}
	return net
}

// mutations returns the recorded requests and forgets them.
func (n *winNode) mutations() []hnstest.Request {
	r := n.hns.Requests()
	n.hns.ResetRequests()
	return r
}

func vxlanLease(t *testing.T, sn, pub, mac string) subnet.Lease {
	t.Helper()
	m, err := backend.ParseMAC(mac)
	if err != nil {
		t.Fatal(err)
	}
	return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{
		PublicIP: netip.MustParseAddr(pub), BackendType: subnet.BackendVXLAN,
		BackendData: backend.VXLANData{VNI: 4096, VtepMAC: m}.Encode(),
	}}
}

func hostgwLease(sn, pub string) subnet.Lease {
	return subnet.Lease{Subnet: netip.MustParsePrefix(sn), Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr(pub), BackendType: subnet.BackendHostGW}}
}

// transcript is a scenario's record: each step's changes, requests and resulting state,
// compared with testdata/scenarios/<name>.txt.
type transcript struct {
	t *testing.T
	n *winNode
	b strings.Builder
}

func newTranscript(t *testing.T, n *winNode) *transcript { return &transcript{t: t, n: n} }

// step records what happened since the last step and the state now.
func (tr *transcript) step(title, changes string) {
	fmt.Fprintf(&tr.b, "== %s\n", title)
	if changes != "" {
		fmt.Fprintf(&tr.b, "changes: %s\n", changes)
	}
	for _, r := range tr.n.mutations() {
		fmt.Fprintf(&tr.b, "request %s", r.Op)
		if r.ID != "" {
			fmt.Fprintf(&tr.b, " %s", r.ID)
		}
		if len(r.Body) > 0 {
			fmt.Fprintf(&tr.b, " %s", summarize(r))
		}
		tr.b.WriteString("\n")
	}
	tr.b.WriteString(tr.n.hns.Render())
	if tr.n.cfg.Backend.Type == subnet.BackendHostGW {
		tr.b.WriteString(tr.n.host.Render())
	}
	tr.b.WriteString("\n")
}

// summarize shortens a request body to what a reader of a transcript looks for.
func summarize(r hnstest.Request) string {
	switch r.Op {
	case "CreateNetwork":
		var n windows.HostComputeNetwork
		_ = json.Unmarshal(r.Body, &n)
		return fmt.Sprintf("%s %s", n.Type, n.Name)
	case "CreateEndpoint":
		var ep windows.HostComputeEndpoint
		_ = json.Unmarshal(r.Body, &ep)
		return fmt.Sprintf("%s %s", ep.Name, ep.IP())
	case "ModifyNetworkSettings":
		var m windows.ModifyNetworkSettingRequest
		var pr windows.PolicyNetworkRequest
		_ = json.Unmarshal(r.Body, &m)
		_ = json.Unmarshal(m.Settings, &pr)
		s := string(m.RequestType)
		for _, p := range pr.Policies {
			s += fmt.Sprintf(" %s %s", p.Type, hnstest.CanonicalJSON(p.Settings))
		}
		return s
	}
	return hnstest.CanonicalJSON(r.Body)
}

func (tr *transcript) check(name string) {
	tr.t.Helper()
	golden(tr.t, filepath.Join("testdata", "scenarios", name+".txt"), tr.b.String())
}

// golden compares got with the file at path (rewriting it with -update).
func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if d := lineDiff(string(want), got); d != "" {
		t.Errorf("%s differs (-want +got), run with -update if intended:\n%s", path, d)
	}
}

// lineDiff is a plain line diff: good enough for transcripts whose lines are sorted.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	i, j := 0, 0
	for i < len(w) || j < len(g) {
		switch {
		case i < len(w) && j < len(g) && w[i] == g[j]:
			i++
			j++
		case j < len(g) && (i >= len(w) || !slices.Contains(w[i:], g[j])):
			fmt.Fprintf(&b, "+%s\n", g[j])
			j++
		default:
			fmt.Fprintf(&b, "-%s\n", w[i])
			i++
		}
	}
	return b.String()
}

// state is the node's HNS and host as text, with object IDs (counted up by the in-memory
// HNS in the order of creation) left out: two nodes that made the same objects in another
// order render the same.
func (n *winNode) state() string {
	ids := regexp.MustCompile(`[0-9A-F]{8}-0000-4000-8000-[0-9A-F]{12}`)
	return ids.ReplaceAllString(n.hns.Render()+n.host.Render(), "ID")
}
