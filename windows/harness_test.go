package windows

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/subnet"
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

func mustConfig(t *testing.T, js string) *subnet.Config {
	t.Helper()
	cfg, err := subnet.ParseConfig([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.CheckFor("windows"); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// winNode is a Windows node: its HNS and host, and weftd's plane on them. A restart is a
// new plane on the same HNS; a reboot also empties HNS of non-persistent networks.
type winNode struct {
	t     *testing.T
	cfg   *subnet.Config
	clock *fakeClock
	hns   *MemHNS
	host  *MemHost
	pcfg  Config
	plane *Plane
	pub   netip.Addr
	own   subnet.Lease
	// underlay is the interface holding the public IP when weftd started, as the daemon
	// picks it: "vEthernet (Ethernet)" once HNS made a vSwitch.
	underlay string
}

func newWinNode(t *testing.T, cfg *subnet.Config, pub string, v Version, pcfg Config) *winNode {
	n := &winNode{t: t, cfg: cfg, clock: newClock(), pub: netip.MustParseAddr(pub), pcfg: pcfg}
	n.host = NewMemHost(Interface{Index: 4, Name: testAdapter, Prefixes: []netip.Prefix{netip.PrefixFrom(n.pub, 24)}})
	n.hns = NewMemHNS(MemOptions{Version: v, ManagementIP: n.pub, Blip: testBlip, Now: n.clock.Now, Host: n.host})
	n.restart()
	return n
}

// restart is a new weftd process.
func (n *winNode) restart() {
	ifs, _ := n.host.Interfaces()
	if i, ok := onLinkIndex(ifs, n.pub); ok {
		for _, x := range ifs {
			if x.Index == i {
				n.underlay = x.Name
			}
		}
	}
	c := n.pcfg
	c.Sleep = n.clock.Sleep
	n.plane = New(n.hns, n.host, c, testLogger(n.t))
}

// backend is the node's backend, built as weftd builds it on Windows.
func (n *winNode) backend() *backend.Backend {
	n.t.Helper()
	b, err := backend.New(n.cfg, backend.Node{Underlay: n.underlay, Addr: n.pub, MTU: 1500,
		Connected: []netip.Prefix{netip.PrefixFrom(n.pub, 24).Masked()}, PublicIP: n.pub}, "windows")
	if err != nil {
		n.t.Fatal(err)
	}
	return b
}

// acquire runs the plane's Prepare as a datastore would for subnet sn, and returns the
// lease it would publish.
func (n *winNode) acquire(sn string) (subnet.Lease, error) {
	b := n.backend()
	p := netip.MustParsePrefix(sn)
	mac, err := n.plane.Prepare(context.Background(), b.State(p, false))
	if err != nil {
		return subnet.Lease{}, err
	}
	n.own = subnet.Lease{Subnet: p, Attrs: b.Attrs(mac)}
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

func (n *winNode) desired(peers []subnet.Lease) *backend.State {
	st, skipped := backend.Desired(n.backend(), n.own, peers, false)
	for _, s := range skipped {
		n.t.Logf("skipped %s: %s", s.Key, s.Reason)
	}
	return st
}

// converge applies the whole State, as weftd does at start and at every resync.
func (n *winNode) converge(peers []subnet.Lease) (backend.Changes, error) {
	return n.plane.Apply(context.Background(), n.desired(peers), backend.Update{Full: true})
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

// peer is another node's lease.
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
	for _, r := range tr.n.hns.Requests() {
		fmt.Fprintf(&tr.b, "request %s", r.Op)
		if r.ID != "" {
			fmt.Fprintf(&tr.b, " %s", r.ID)
		}
		if len(r.Body) > 0 {
			fmt.Fprintf(&tr.b, " %s", summarize(r))
		}
		tr.b.WriteString("\n")
	}
	tr.n.hns.ResetRequests()
	tr.b.WriteString(tr.n.hns.Render())
	if tr.n.cfg.Backend.Type == subnet.BackendHostGW {
		tr.b.WriteString(tr.n.host.Render())
	}
	tr.b.WriteString("\n")
}

// summarize shortens a request body to what a reader of a transcript looks for.
func summarize(r Request) string {
	switch r.Op {
	case "CreateNetwork":
		var n HostComputeNetwork
		_ = json.Unmarshal(r.Body, &n)
		return fmt.Sprintf("%s %s", n.Type, n.Name)
	case "CreateEndpoint":
		var ep HostComputeEndpoint
		_ = json.Unmarshal(r.Body, &ep)
		return fmt.Sprintf("%s %s", ep.Name, ep.IP())
	case "ModifyNetworkSettings":
		var m ModifyNetworkSettingRequest
		var pr PolicyNetworkRequest
		_ = json.Unmarshal(r.Body, &m)
		_ = json.Unmarshal(m.Settings, &pr)
		s := string(m.RequestType)
		for _, p := range pr.Policies {
			s += fmt.Sprintf(" %s %s", p.Type, canonicalJSON(p.Settings))
		}
		return s
	}
	return canonicalJSON(r.Body)
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
		case j < len(g) && (i >= len(w) || !contains(w[i:], g[j])):
			fmt.Fprintf(&b, "+%s\n", g[j])
			j++
		default:
			fmt.Fprintf(&b, "-%s\n", w[i])
			i++
		}
	}
	return b.String()
}

func contains(lines []string, l string) bool {
	for _, x := range lines {
		if x == l {
			return true
		}
	}
	return false
}
