package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/internal/hnssim"
	"github.com/weftnet/weft/windows"
)

// needFlanneldExe returns flanneld.exe, built once (cached across runs by its stamp), or
// skips the test when it cannot be built.
func needFlanneldExe(t *testing.T, repo string) string {
	t.Helper()
	start := time.Now()
	bin, err := cluster.PrepareFlanneldExe(repo)
	if err != nil {
		t.Skipf("flanneld.exe is not built and cannot be built (set %s to use a prebuilt one): %v", cluster.FlanneldExeEnv, err)
	}
	t.Logf("flanneld.exe ready in %v", time.Since(start).Round(time.Millisecond))
	return bin
}

// renderCalls is a log of HNS calls, one a line.
func renderCalls(calls []hnssim.Call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "%s\n", callKey(c))
	}
	return b.String()
}

// callKey is a call as the comparison sees it: everything hcn handed HNS (the export, its
// GUID or path, the object its handle stood for, HNSCall's method, the body) and the
// answer's HRESULT.
func callKey(c hnssim.Call) string {
	name := c.Name
	if c.Method != "" {
		name += " " + c.Method
	}
	return fmt.Sprintf("%s id=%s object=%s body=%s hr=%v", name, c.ID, c.Object, c.Body, c.HResult)
}

// scene runs the daemon (its command line from argv, once the node has a new HNS) on the
// Windows node from an empty HNS to convergence with the Linux nodes peers, then through a peer (leaver, one of peers, running weftd) leaving and
// coming back with its subnet and VTEP MAC, and returns every HNS call it made. The daemon keeps running.
func scene(t *testing.T, c *cluster.Cluster, w *wineNode, argv func() []string, peers []*cluster.Node, leaver *cluster.Node, weftd string) []hnssim.Call {
	t.Helper()
	w.ServeHNS(nil)
	w.start(argv())
	w.waitRSRs(c, "converging", peers)
	st := w.state(c)
	waitToward(t, peers, w, st)

	before, err := leaver.Subnet()
	if err != nil {
		t.Fatal(err)
	}
	mac := leaseMAC(t, c, before)
	if _, err := leaver.Stop(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deleteLease(t, c, before)
	rest := slices.DeleteFunc(slices.Clone(peers), func(n *cluster.Node) bool { return n == leaver })
	w.waitRSRs(c, "a peer leaves", rest)
	if err := leaver.StartDaemon(append([]string{weftd}, leaver.WeftdArgs()...)...); err != nil {
		t.Fatal(err)
	}
	if err := leaver.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
	if after, err := leaver.Subnet(); err != nil || after != before || leaseMAC(t, c, after) != mac {
		t.Fatalf("the peer came back with subnet %s (%v), VTEP MAC %s, not its %s, %s: the scene differs", after, err, leaseMAC(t, c, after), before, mac)
	}
	w.waitRSRs(c, "the peer comes back", peers)
	// Both daemons look the network up now and then (flanneld on every lease event, weftd
	// every WatchInterval): what matters is that each kind of request was made.
	return w.Server.Calls()
}

// intended is a difference between the requests of flanneld.exe and weftd.exe for the same
// scene that is meant: a request (callKey) only one of them makes, and why.
type intended struct {
	only string // "flanneld.exe" or "weftd.exe"
	key  string
	why  string
}

// compareCalls compares the HNS requests of flanneld.exe and weftd.exe for one scene. The
// requests that change something must be the same, as many times each (their order
// between peers follows the order the leases came in); the reads must be of the same kinds,
// however many (both poll, at their own pace). Every difference must be listed in want,
// and every listed one must be seen: a difference that went away is a list to update.
func compareCalls(flanneld, weftd []hnssim.Call, want []intended) []string {
	count := func(calls []hnssim.Call, change bool) map[string]int {
		m := map[string]int{}
		for _, c := range calls {
			if c.Mutates() == change {
				m[callKey(c)]++
			}
		}
		return m
	}
	listed := map[string]intended{}
	for _, d := range want {
		listed[d.only+" "+d.key] = d
	}
	seen := map[string]bool{}
	var problems []string
	diff := func(kind string, f, w map[string]int, exact bool) {
		for _, k := range slices.Sorted(maps.Keys(mapUnion(f, w))) {
			nf, nw := f[k], w[k]
			if nf == nw || (!exact && nf > 0 && nw > 0) {
				continue
			}
			only := "flanneld.exe"
			if nw > nf {
				only = "weftd.exe"
			}
			if _, ok := listed[only+" "+k]; ok && (nf == 0 || nw == 0) {
				seen[only+" "+k] = true
				continue
			}
			problems = append(problems, fmt.Sprintf("%s sent by flanneld.exe %d times, by weftd.exe %d times: %s", kind, nf, nw, k))
		}
	}
	diff("change", count(flanneld, true), count(weftd, true), true)
	diff("read", count(flanneld, false), count(weftd, false), false)
	for _, d := range want {
		if !seen[d.only+" "+d.key] {
			problems = append(problems, fmt.Sprintf("listed difference not seen (only %s: %s): %s", d.only, d.why, d.key))
		}
	}
	return problems
}

// mapUnion is the keys of a and b.
func mapUnion(a, b map[string]int) map[string]bool {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return m
}

// hcnQuery is the body hcn sends with a lookup: its HostComputeQuery, whose Filter is a
// JSON object in a string (hcsshim hcn/hcn.go, defaultQuery).
func hcnQuery(filter string) string {
	f, _ := json.Marshal(filter) // a string always marshals
	return `{"SchemaVersion":{"Major":2,"Minor":0},"Filter":` + string(f) + `}`
}

// vxlanIntended are the differences between flanneld.exe's and weftd.exe's requests in
// the vxlan scene, each with why; networkID is the network's (the same in both runs: the
// simulated HNS numbers its objects).
func vxlanIntended(networkID string) []intended {
	byID := hcnQuery(`{"ID":"` + networkID + `"}`)
	return []intended{
		{"flanneld.exe", "HcnEnumerateNetworks id= object= body=" + byID + " hr=0x00000000",
			"after creating the network flanneld polls it by ID (hcn.GetNetworkByID) for the management IP; weftd polls it by name, with the same answer"},
		{"flanneld.exe", "HcnQueryNetworkProperties id= object=" + networkID + " body=" + byID + " hr=0x00000000",
			"the same poll: hcn hands the lookup's query on to HcnQueryNetworkProperties"},
		{"weftd.exe", "HcnEnumerateEndpoints id= object= body=" + hcnQuery(`{"VirtualNetwork":"`+networkID+`"}`) + " hr=0x00000000",
			"a full Apply lists the network's endpoints to remove the remote endpoints of weftd's other peer mode (remote endpoints, for HNS before 9.2) after a change of mode; flanneld v0.28 has no such mode"},
	}
}

// TestFlanneldExeUnderWine: the real flanneld v0.28.10 built for Windows (flanneld.exe,
// tools/flannel/install-flanneld.sh with GOOS=windows) runs under Wine as the Windows node
// of the netns cluster, against the simulated HNS (internal/hnssim over windows/hnstest),
// beside Linux nodes running weftd (and flanneld, where it can be built), vxlan with VNI
// 4096. It is the reference for weftd.exe's Windows behaviour:
//
//   - flanneld.exe converges: its lease (VNI 4096, the DR MAC as VtepMAC), a
//     RemoteSubnetRoute per peer, each Linux node's route, neighbour and FDB entry toward
//     it; a peer that leaves and comes back is removed and added again.
//   - A Windows node migrates flanneld.exe -> weftd.exe -> flanneld.exe keeping its HNS
//     network (no network is created or deleted, its ID stays), its subnet and its DR MAC:
//     weftd.exe adopting flanneld's network asks HNS for no change at all; flanneld.exe
//     adopting weftd's removes and adds back each peer's RemoteSubnetRoute, as it does on
//     every start, with the same bodies.
//   - The same scene (an empty HNS, the same subnet and peers, a peer leaving and coming
//     back) run by each daemon: the requests that change HNS are the same, body for body
//     (HcnCreateNetwork, the HostRoute policy, every RemoteSubnetRoute added and removed);
//     the reads are of the same kinds; what differs is listed in vxlanIntended, with why.
func TestFlanneldExeUnderWine(t *testing.T) {
	bins, repo := needWine(t)
	flanneldExe := needFlanneldExe(t, repo)
	c := newWineCluster(t, bins, windowsConf)
	weftdExe := buildWindowsWeftd(t, repo)
	peers := startLinuxPeers(t, c, repo, bins.weftd, []string{"n1", "n2"}, "n3")
	leaver := peers[1] // weftd: it comes back with its subnet and VTEP MAC

	win := newWineNode(t, c, repo, "w4")
	flanneldRun := func() []string { return win.flanneldArgv(flanneldExe, true) }
	weftdRun := func() []string { return win.weftdArgv(weftdExe) }

	start := time.Now()
	fromFlanneld := scene(t, c, win, flanneldRun, peers, leaver, bins.weftd)
	t.Logf("flanneld.exe's scene: %d HNS calls, %v", len(fromFlanneld), time.Since(start).Round(time.Millisecond))
	first := win.state(c)

	// Migration: flanneld.exe -> weftd.exe -> flanneld.exe on the same HNS.
	migrate := func(to string, argv []string, changes func(calls []hnssim.Call) []string) {
		t.Helper()
		// The Linux weftd nodes keep their route to the Windows node's subnet all along: the
		// lease flanneld.exe publishes without a VtepMAC while it starts is no reason to drop it.
		var monitors []*routeMonitor
		for _, n := range peers[:2] {
			monitors = append(monitors, monitorRoutes(t, n))
		}
		win.stop()
		win.Server.ResetCalls()
		start := time.Now()
		win.start(argv)
		win.waitRSRs(c, "after the migration to "+to, peers)
		var problems []string
		deadline := time.Now().Add(convergeTimeout)
		for problems = changes(win.Server.Calls()); len(problems) > 0 && time.Now().Before(deadline); problems = changes(win.Server.Calls()) {
			time.Sleep(100 * time.Millisecond)
		}
		for _, p := range problems {
			t.Errorf("migration to %s: %s", to, p)
		}
		if st := win.state(c); st != first {
			t.Errorf("migration to %s: node %+v, before %+v: the network, its DR MAC, the subnet or the VtepMAC changed", to, st, first)
		}
		for i, m := range monitors {
			if deleted := m.deleted(first.subnet); deleted != "" {
				t.Errorf("migration to %s: %s dropped its route to the Windows node meanwhile: %s", to, peers[i].Name, deleted)
			}
		}
		t.Logf("migrated to %s in %v: %d HNS calls", to, time.Since(start).Round(time.Millisecond), len(win.Server.Calls()))
	}
	migrate("weftd.exe", weftdRun(), func(calls []hnssim.Call) []string {
		var problems []string
		for _, c := range calls {
			if c.Mutates() {
				problems = append(problems, "weftd.exe adopting flanneld's network asked for a change: "+callKey(c))
			}
		}
		if lookups(calls, first.networkID) == 0 {
			problems = append(problems, "weftd.exe is ready without having read the network")
		}
		return problems
	})
	migrate("flanneld.exe", flanneldRun(), func(calls []hnssim.Call) []string {
		// flanneld removes each peer's RemoteSubnetRoute and adds it back, with the same body.
		removed, added := map[string]int{}, map[string]int{}
		var problems []string
		for _, c := range calls {
			if !c.Mutates() {
				continue
			}
			var req struct{ RequestType string }
			switch {
			case c.Name != "HcnModifyNetwork" || !strings.Contains(c.Body, `"Type":"RemoteSubnetRoute"`) || json.Unmarshal([]byte(c.Body), &req) != nil:
				problems = append(problems, "flanneld.exe adopting weftd's network asked for a change other than a peer's policy: "+callKey(c))
			case req.RequestType == "Remove":
				removed[strings.Replace(c.Body, `"Remove"`, `"Add"`, 1)]++
			default:
				added[c.Body]++
			}
		}
		if len(added) != len(peers) || !maps.Equal(removed, added) {
			problems = append(problems, fmt.Sprintf("flanneld.exe removed %v and added %v, want each of the %d peers' policies once, removed and added back", removed, added, len(peers)))
		}
		return problems
	})

	// The same scene, run by weftd.exe: its requests against flanneld.exe's.
	win.stop()
	start = time.Now()
	fromWeftd := scene(t, c, win, weftdRun, peers, leaver, bins.weftd)
	t.Logf("weftd.exe's scene: %d HNS calls, %v", len(fromWeftd), time.Since(start).Round(time.Millisecond))
	if st := win.state(c); st != first {
		t.Errorf("weftd.exe's scene ended with %+v, flanneld.exe's with %+v: not the same scene", st, first)
	}
	for _, p := range compareCalls(fromFlanneld, fromWeftd, vxlanIntended(first.networkID)) {
		t.Error(p)
	}
	if t.Failed() {
		t.Logf("flanneld.exe's requests:\n%s\nweftd.exe's requests:\n%s", renderCalls(fromFlanneld), renderCalls(fromWeftd))
	}
	var changes []hnssim.Call
	for _, c := range fromWeftd {
		if c.Mutates() {
			changes = append(changes, c)
		}
	}
	t.Logf("%d requests that change HNS, body for body the same from both daemons:\n%s", len(changes), renderCalls(changes))
}

// TestCompareCalls: the comparison fails on a change request one daemon makes and the other
// does not, or makes more often, on a kind of read only one makes, and on a listed
// difference that does not occur; it passes read counts that differ and listed differences.
func TestCompareCalls(t *testing.T) {
	read := hnssim.Call{Name: "HcnEnumerateNetworks", Body: hcnQuery(`{"Name":"flannel.4096"}`)}
	add := hnssim.Call{Name: "HcnModifyNetwork", Object: "n", Body: `{"RequestType":"Add"}`}
	other := hnssim.Call{Name: "HcnEnumerateEndpoints", Body: hcnQuery(`{"VirtualNetwork":"n"}`)}
	list := []intended{{"weftd.exe", callKey(other), "why"}}
	for _, tc := range []struct {
		name            string
		flanneld, weftd []hnssim.Call
		want            []intended
		problems        int
	}{
		{"same", []hnssim.Call{read, add}, []hnssim.Call{read, add}, nil, 0},
		{"reads counted apart", []hnssim.Call{read, read, read, add}, []hnssim.Call{read, add}, nil, 0},
		{"a change more often", []hnssim.Call{read, add}, []hnssim.Call{read, add, add}, nil, 1},
		{"a change only one makes", []hnssim.Call{read}, []hnssim.Call{read, add}, nil, 1},
		{"a read only one makes", []hnssim.Call{read, add}, []hnssim.Call{read, add, other}, nil, 1},
		{"a listed difference", []hnssim.Call{read, add}, []hnssim.Call{read, add, other}, list, 0},
		{"a listed difference by the other", []hnssim.Call{read, add, other}, []hnssim.Call{read, add}, list, 2},
		{"a listed difference gone", []hnssim.Call{read, add}, []hnssim.Call{read, add}, list, 1},
		{"a refused call", []hnssim.Call{read, add}, []hnssim.Call{read, {Name: add.Name, Object: add.Object, Body: add.Body, HResult: windows.HCNInvalidJSON}}, nil, 2},
	} {
		if got := compareCalls(tc.flanneld, tc.weftd, tc.want); len(got) != tc.problems {
			t.Errorf("%s: %d problems, want %d: %q", tc.name, len(got), tc.problems, got)
		}
	}
}

// buildCmdletStub builds e2e/cmdletstub, the stand-in for PowerShell, as dir/powershell.exe.
func buildCmdletStub(t *testing.T, repo, dir string) {
	t.Helper()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "powershell.exe"), "./e2e/cmdletstub")
	build.Dir = repo
	build.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the cmdlet stand-in: %v\n%s", err, out)
	}
}

// cmdlets reads the stand-in's log: the arguments of each run of powershell.exe.
func cmdlets(t *testing.T, path string) [][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var args []string
		if err := json.Unmarshal([]byte(line), &args); err != nil {
			t.Fatalf("the cmdlet log %s: %q: %v", path, line, err)
		}
		out = append(out, args)
	}
	return out
}

// waitExit waits for the node's daemon to exit by itself and returns its log's tail.
func (w *wineNode) waitExit(timeout time.Duration) string {
	w.t.Helper()
	deadline := time.Now().Add(timeout)
	for w.Running() {
		if time.Now().After(deadline) {
			w.t.Fatalf("the daemon still runs after %v; it was to stop at its first cmdlet:\n%s", timeout, w.LogTail(30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return w.LogTail(40)
}

// v1Requests renders a run's HNS v1 requests (HNSCall), one a line: method, path, body,
// HRESULT; and fails the test on any HNS v2 call that changes something.
func v1Requests(t *testing.T, calls []hnssim.Call) []string {
	t.Helper()
	var out []string
	for _, c := range calls {
		switch {
		case c.Name == "HNSCall":
			out = append(out, fmt.Sprintf("%s %s %s %v", c.Method, c.ID, c.Body, c.HResult))
		case c.Mutates():
			t.Errorf("flanneld.exe's host-gw changed HNS through v2: %s", callKey(c))
		}
	}
	return out
}

// TestFlanneldExeHostGWUnderWine: flanneld.exe's Windows host-gw, which speaks HNS v1
// (hcsshim's HNSCall wrappers) and then runs PowerShell cmdlets, under Wine against the
// simulated HNS, as far as its first cmdlet. Wine has no PowerShell (its powershell.exe
// does nothing and exits 0), so the node's PATH starts with e2e/cmdletstub built as
// powershell.exe, which records the command and refuses it: flanneld.exe stops there, and
// every HNS request it made up to there is checked.
//
// With --iface naming the node's address, flanneld finds its interface through Go's
// net.Interfaces (Wine lists the node's own); without --iface its first step is a cmdlet,
// the default route's interface from Get-NetRoute (pkg/ip/iface_windows.go), checked here
// too, before the HNS is touched.
//
// Checked: its lease (host-gw, the node's address) and each Linux node's route to its
// subnet through it; the v1 requests (the network looked up by name and made as an
// L2Bridge with the lease's subnet and gateway, polled until HNS reports the management
// IP, the host endpoint cbr0_ep looked up and made with the subnet's .2, attached to the
// host's compartment 1), none refused, and what they left in HNS; the first cmdlet, exactly:
// forwarding on for the interface that holds the management IP (eth0's index). A restart
// adopts the network and the endpoint (no create, no delete) and attaches the endpoint
// again, answered HCN_E_ENDPOINT_ALREADY_ATTACHED as HNS does; flannel knows that answer
// by its text alone, which Wine cannot give it (see below), so under Wine the restart stops
// there.
func TestFlanneldExeHostGWUnderWine(t *testing.T) {
	bins, repo := needWine(t)
	flanneldExe := needFlanneldExe(t, repo)
	c := newWineCluster(t, bins, hostGWConf)
	stub := filepath.Join(c.Dir(), "cmdletstub")
	if err := os.Mkdir(stub, 0o755); err != nil {
		t.Fatal(err)
	}
	buildCmdletStub(t, repo, stub)

	peers := startLinuxPeers(t, c, repo, bins.weftd, []string{"n1", "n2"}, "")
	win := newWineNode(t, c, repo, "w3")
	win.ServeHNS(nil)
	cmdletLog := filepath.Join(win.Dir, "cmdlets.log")
	// run runs flanneld.exe until it stops, which it must with the error stop, and returns
	// the end of its run's log.
	run := func(stop string, iface bool) string {
		t.Helper()
		argv := win.flanneldArgv(flanneldExe, iface)
		argv = slices.Insert(argv, 1, "WINEPATH="+winnode.Path(stub), "WEFT_CMDLET_LOG="+winnode.Path(cmdletLog))
		win.Server.ResetCalls()
		if err := win.StartDaemon(argv...); err != nil {
			t.Fatal(err)
		}
		logTail := win.waitExit(60 * time.Second)
		if i := strings.LastIndex(logTail, "=== weft-e2e "); i >= 0 {
			logTail = logTail[i:]
		}
		if !strings.Contains(logTail, stop) {
			t.Fatalf("flanneld.exe did not stop with %q:\n%s", stop, logTail)
		}
		return logTail
	}
	// Without --iface, flanneld's first step is a cmdlet: the default route's interface.
	run("Failed to find any valid interface to use", false)
	ran := cmdlets(t, cmdletLog)
	if len(ran) != 1 || len(ran[0]) != 5 || !strings.Contains(ran[0][4], `ConvertTo-Json (Get-NetRoute | Where { $_.DestinationPrefix -eq '0.0.0.0/0' } | Select-Object -Property ifIndex)`) {
		t.Errorf("without --iface flanneld.exe ran %q, want the default route's interface from Get-NetRoute", ran)
	}
	if calls := win.Server.Calls(); len(calls) != 0 {
		t.Errorf("without --iface flanneld.exe called HNS before it stopped: %s", renderCalls(calls))
	}

	start := time.Now()
	if logTail := run("failed to enable forwarding on eth0", true); !strings.Contains(logTail, "cmdletstub: not run") {
		t.Errorf("flanneld.exe's first run did not stop at the stand-in's refusal:\n%s", logTail)
	}
	t.Logf("flanneld.exe host-gw ran to its first cmdlet in %v", time.Since(start).Round(time.Millisecond))

	// Its lease, and the Linux nodes' routes to it.
	leases, err := c.Leases()
	if err != nil {
		t.Fatal(err)
	}
	var sn netip.Prefix
	for _, l := range leases {
		if l.Attrs.PublicIP == win.IP {
			sn = l.Subnet
			if l.Attrs.BackendType != "host-gw" {
				t.Errorf("the Windows node's lease %s, want host-gw", l)
			}
		}
	}
	if !sn.IsValid() {
		t.Fatalf("no lease of the Windows node's address %s in %v", win.IP, leases)
	}
	waitRouteVia(t, peers, sn, win.IP)

	// What it asked of HNS, and what that left there.
	first := v1Requests(t, win.Server.Calls())
	t.Logf("flanneld.exe host-gw's HNS v1 requests:\n%s", strings.Join(first, "\n"))
	net, err := win.HNS.NetworkByName("cbr0")
	if err != nil {
		t.Fatalf("no network cbr0: %v\n%s", err, win.HNS.Render())
	}
	gw, epIP := sn.Addr().Next(), sn.Addr().Next().Next()
	if sub := net.StaticSubnet(); net.Type != windows.NetworkL2Bridge || sub == nil || sub.IPAddressPrefix != sn.String() {
		t.Errorf("network cbr0: type %s, subnet %+v; want L2Bridge with %s", net.Type, sub, sn)
	}
	eps, err := win.HNS.NetworkEndpoints(net.ID)
	if err != nil || len(eps) != 1 || eps[0].Name != "cbr0_ep" || eps[0].IP() != epIP {
		t.Fatalf("endpoints of cbr0: %+v (%v), want cbr0_ep with %s", eps, err, epIP)
	}
	ep := eps[0]
	if host, err := win.HNS.HostDefaultNamespace(); err != nil || !strings.EqualFold(ep.HostComputeNamespace, host.ID) {
		t.Errorf("cbr0_ep in namespace %q, the host's is %+v (%v): not attached to the host", ep.HostComputeNamespace, host, err)
	}
	attach := "POST /endpoints/" + ep.ID + `/attach {"SystemType":"Host","CompartmentId":1}`
	if want := []string{
		"GET /networks/  0x00000000",
		`POST /networks/ {"Name":"cbr0","Type":"L2Bridge","Subnets":[{"AddressPrefix":"` + sn.String() + `","GatewayAddress":"` + gw.String() + `"}]} 0x00000000`,
		"GET /networks/" + net.ID + "  0x00000000", // until HNS reports the management IP
		"GET /endpoints/  0x00000000",
		`POST /endpoints/ {"Name":"cbr0_ep","VirtualNetwork":"` + net.ID + `","IPAddress":"` + epIP.String() + `"} 0x00000000`,
		attach + " 0x00000000",
	}; !slices.Equal(slices.Compact(first), want) {
		t.Errorf("flanneld.exe host-gw's HNS v1 requests (repeats folded):\n%s\nwant:\n%s", strings.Join(slices.Compact(first), "\n"), strings.Join(want, "\n"))
	}

	// The first cmdlet: forwarding on for eth0, which holds the management IP.
	index := strings.Fields(nodeExec(t, win.Node.Node, "cat", "/sys/class/net/eth0/ifindex"))
	wantCmd := fmt.Sprintf(`$ErrorActionPreference="Stop";try { Set-NetIPInterface -ifIndex %s -AddressFamily IPv4 -Forwarding Enabled } catch { Write-Host $_; os.Exit(-1) }`, index[0])
	ran = cmdlets(t, cmdletLog)[1:]
	if len(ran) != 1 || !slices.Equal(ran[0], []string{"-NoLogo", "-NoProfile", "-NonInteractive", "-Command", wantCmd}) {
		t.Errorf("cmdlets run: %q, want only %q", ran, wantCmd)
	}

	// A restart adopts the network and the endpoint, and attaches the endpoint again, which
	// HNS answers HCN_E_ENDPOINT_ALREADY_ATTACHED. flannel takes that for success by the
	// error's text, "This endpoint is already attached to the switch." (hostgw_windows.go),
	// which hcsshim's error takes from Windows' message table (syscall.Errno's Error, through
	// FormatMessage): Wine has no text for HNS's codes ("winapi error #2151350292"), so under
	// Wine flanneld.exe retries for 5 s and stops there, before any cmdlet. (The text is the
	// installation's language's, so a localized Windows would fail the same way.)
	logTail := run("failed to hot attach bridge HNSEndpoint cbr0_ep to host compartment", true)
	if !strings.Contains(logTail, "0x803b0014") {
		t.Errorf("flanneld.exe's restart did not stop at HCN_E_ENDPOINT_ALREADY_ATTACHED (0x803b0014):\n%s", logTail)
	}
	again := slices.Compact(v1Requests(t, win.Server.Calls()))
	if want := []string{"GET /networks/  0x00000000", "GET /endpoints/  0x00000000", attach + " 0x803B0014"}; !slices.Equal(again, want) {
		t.Errorf("flanneld.exe host-gw's HNS v1 requests on a restart (repeats folded):\n%s\nwant:\n%s", strings.Join(again, "\n"), strings.Join(want, "\n"))
	}
	if n, err := win.HNS.NetworkByName("cbr0"); err != nil || n.ID != net.ID {
		t.Errorf("network cbr0 after the restart: %+v (%v), want %s kept", n, err, net.ID)
	}
	if ran := cmdlets(t, cmdletLog); len(ran) != 2 {
		t.Errorf("the restart ran cmdlets: %q", ran[2:])
	}
}

// routeMonitor records the route changes a node's kernel reports (ip monitor route).
type routeMonitor struct {
	cmd *exec.Cmd
	out *strings.Builder
}

// monitorRoutes starts watching n's routes until the test ends.
func monitorRoutes(t *testing.T, n *cluster.Node) *routeMonitor {
	t.Helper()
	m := &routeMonitor{out: &strings.Builder{}}
	m.cmd = exec.Command("ip", "netns", "exec", n.NS, "ip", "-o", "monitor", "route")
	m.cmd.Stdout = m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("ip monitor route in %s: %v", n.Name, err)
	}
	t.Cleanup(func() { _ = m.cmd.Process.Kill(); _ = m.cmd.Wait() })
	time.Sleep(100 * time.Millisecond) // subscribed before anything it must see
	return m
}

// deleted stops the monitor and returns its first line deleting a route to sn, "" if none.
func (m *routeMonitor) deleted(sn netip.Prefix) string {
	_ = m.cmd.Process.Kill()
	_ = m.cmd.Wait()
	for _, l := range strings.Split(m.out.String(), "\n") {
		if strings.HasPrefix(l, "Deleted ") && strings.Contains(l, sn.String()+" ") {
			return l
		}
	}
	return ""
}
