package masq

import (
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

func rulesV4() Rules {
	return Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.244.1.0/24")}
}

func rulesDual() Rules {
	r := rulesV4()
	r.IPv6Network, r.IPv6Subnet = pfx("fd00:10:244::/56"), pfx("fd00:10:244:1::/64")
	return r
}

func weftTable(v6 bool) *nftables.Table {
	return &nftables.Table{Name: TableName, Family: familyOf(v6).table}
}

// kernelRules returns the rules of weft's chain as the kernel has them.
func kernelRules(t *testing.T, conn *nftables.Conn, v6 bool) []*nftables.Rule {
	t.Helper()
	rules, err := conn.GetRules(weftTable(v6), &nftables.Chain{Name: ChainName})
	if err != nil {
		t.Fatalf("listing rules of %s: %v", familyOf(v6).name, err)
	}
	return rules
}

func handles(rules []*nftables.Rule) []uint64 {
	out := make([]uint64, len(rules))
	for i, r := range rules {
		out[i] = r.Handle
	}
	return out
}

// tableExists reports whether a table of that name exists in the family.
func tableExists(t *testing.T, conn *nftables.Conn, name string, v6 bool) bool {
	t.Helper()
	tables, err := conn.ListTablesOfFamily(familyOf(v6).table)
	if err != nil {
		t.Fatal(err)
	}
	return slices.ContainsFunc(tables, func(tb *nftables.Table) bool { return tb.Name == name })
}

func chainNames(t *testing.T, conn *nftables.Conn, v6 bool) []string {
	t.Helper()
	chains, err := conn.ListChainsOfTableFamily(familyOf(v6).table)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range chains {
		if c.Table.Name == TableName {
			names = append(names, c.Name)
		}
	}
	slices.Sort(names)
	return names
}

// assertProgrammed checks that the kernel holds exactly the rules of r for one
// family: the chain's properties, and each rule both as decoded and as the
// raw expressions weft sent (so a decoder bug cannot hide an encoder bug).
func assertProgrammed(t *testing.T, conn *nftables.Conn, r Rules, v6 bool) {
	t.Helper()
	f := familyOf(v6)
	p, err := buildPlan(r)
	if err != nil {
		t.Fatal(err)
	}
	want := p.v4.rules
	if v6 {
		want = p.v6.rules
	}
	chain, err := conn.ListChain(weftTable(v6), ChainName)
	if err != nil {
		t.Fatalf("%s: chain %s: %v", f.name, ChainName, err)
	}
	if chain.Type != nftables.ChainTypeNAT || *chain.Hooknum != *nftables.ChainHookPostrouting ||
		*chain.Priority != 100 || chain.Policy == nil || *chain.Policy != nftables.ChainPolicyAccept {
		t.Errorf("%s: chain is type %s hook %d priority %d policy %v, want nat postrouting 100 accept",
			f.name, chain.Type, *chain.Hooknum, *chain.Priority, chain.Policy)
	}
	got := kernelRules(t, conn, v6)
	if len(got) != len(want) {
		t.Fatalf("%s: kernel has %d rules, want %d", f.name, len(got), len(want))
	}
	for i, kr := range got {
		spec, err := f.decode(kr.Exprs, kr.UserData)
		if err != nil {
			t.Errorf("%s rule %d: %v", f.name, i+1, err)
			continue
		}
		if !spec.equal(want[i]) {
			t.Errorf("%s rule %d is %s, want %s", f.name, i+1, spec, want[i])
		}
		exprs, udata := f.encode(want[i])
		if !reflect.DeepEqual(kr.Exprs, exprs) || string(kr.UserData) != string(udata) {
			t.Errorf("%s rule %d: kernel holds %#v %q, sent %#v %q", f.name, i+1, kr.Exprs, kr.UserData, exprs, udata)
		}
	}
}

// nftList runs `nft list table` in ns, when nft is installed, as a second
// opinion from nftables itself on what the expressions mean.
func nftList(t *testing.T, ns netns.NsHandle, family string) (string, bool) {
	t.Helper()
	nft, err := exec.LookPath("nft")
	if err != nil {
		return "", false
	}
	fd, err := unix.Dup(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	nsFile := os.NewFile(uintptr(fd), "netns")
	defer nsFile.Close()
	var out []byte
	err = inNetNS(ns, func() error {
		var err error
		out, err = exec.Command(nft, "list", "table", family, TableName).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("nft list table %s %s: %v\n%s", family, TableName, err, out)
	}
	return string(out), true
}

// txWatch counts the nftables transactions committed in a namespace.
type txWatch struct {
	conn *nftables.Conn
	mon  *nftables.Monitor
	ch   chan *nftables.MonitorEvents
}

func watchTransactions(t *testing.T, ns netns.NsHandle) *txWatch {
	t.Helper()
	conn, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		t.Fatal(err)
	}
	mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(256))
	ch, err := conn.AddGenerationalMonitor(mon)
	if err != nil {
		t.Fatalf("monitoring nftables: %v", err)
	}
	t.Cleanup(func() { mon.Close() })
	return &txWatch{conn: conn, mon: mon, ch: ch}
}

// since returns the transactions committed since the last call. It commits
// a marker transaction of its own and reads up to it, so the answer does not
// depend on how fast the monitor goroutine runs.
func (w *txWatch) since(t *testing.T) []*nftables.MonitorEvents {
	t.Helper()
	marker := &nftables.Table{Name: "weft-test-marker", Family: nftables.TableFamilyIPv4}
	w.conn.AddTable(marker)
	w.conn.DelTable(marker)
	if err := w.conn.Flush(); err != nil {
		t.Fatalf("committing the marker transaction: %v", err)
	}
	var txs []*nftables.MonitorEvents
	timeout := time.After(5 * time.Second)
	for {
		select {
		case tx, ok := <-w.ch:
			if !ok {
				t.Fatal("monitor closed")
			}
			if isMarker(tx, marker.Name) {
				return txs
			}
			txs = append(txs, tx)
		case <-timeout:
			t.Fatal("marker transaction never seen by the monitor")
		}
	}
}

func isMarker(tx *nftables.MonitorEvents, name string) bool {
	for _, ev := range tx.Changes {
		if tb, ok := ev.Data.(*nftables.Table); ok && tb.Name == name {
			return true
		}
	}
	return false
}

// ensureBoth ensures both families' rules for r, IPv4 first, as a dual-stack node's two data
// planes do.
func ensureBoth(m *Manager, r Rules) (bool, error) {
	c4, err4 := m.EnsureFamily(r, false)
	c6, err6 := m.EnsureFamily(r, true)
	return c4 || c6, errors.Join(err4, err6)
}

func ensure(t *testing.T, m *Manager, r Rules) bool {
	t.Helper()
	changed, err := ensureBoth(m, r)
	if err != nil {
		t.Fatalf("Ensure(%+v): %v", r, err)
	}
	return changed
}

func TestEnsureCreatesRules(t *testing.T) {
	needRoot(t)
	m, conn, ns := newTestManager(t)
	if !ensure(t, m, rulesDual()) {
		t.Fatal("first Ensure reported no change")
	}
	assertProgrammed(t, conn, rulesDual(), false)
	assertProgrammed(t, conn, rulesDual(), true)

	for family, want := range map[string][]string{
		"ip": {
			"type nat hook postrouting priority srcnat; policy accept;",
			`meta mark & 0x00004000 == 0x00004000 return comment "` + commentKubeProxy + `"`,
			`ip saddr 10.244.0.0/16 ip daddr 10.244.0.0/16 return comment "` + commentWithin + `"`,
			`ip saddr 10.244.0.0/16 ip daddr != 224.0.0.0/4 masquerade fully-random comment "` + commentToOutside + `"`,
			`ip saddr != 10.244.0.0/16 ip daddr 10.244.1.0/24 return comment "` + commentToOwnPods + `"`,
			`ip saddr != 10.244.0.0/16 ip daddr 10.244.0.0/16 masquerade fully-random comment "` + commentToOtherPods + `"`,
		},
		"ip6": {
			`ip6 saddr fd00:10:244::/56 ip6 daddr != ff00::/8 masquerade fully-random`,
			`ip6 saddr != fd00:10:244::/56 ip6 daddr fd00:10:244:1::/64 return`,
		},
	} {
		out, ok := nftList(t, ns, family)
		if !ok {
			t.Log("nft not installed: not cross-checking with nft's reading of the rules")
			break
		}
		t.Logf("nft list table %s %s:\n%s", family, TableName, out)
		for _, line := range want {
			if !strings.Contains(out, line) {
				t.Errorf("nft list table %s %s lacks %q:\n%s", family, TableName, line, out)
			}
		}
	}
}

func TestEnsureTwiceChangesNothing(t *testing.T) {
	needRoot(t)
	m, conn, ns := newTestManager(t)
	ensure(t, m, rulesDual())
	before4, before6 := handles(kernelRules(t, conn, false)), handles(kernelRules(t, conn, true))
	w := watchTransactions(t, ns)
	w.since(t)

	for i := range 3 {
		if ensure(t, m, rulesDual()) {
			t.Fatalf("Ensure %d with unchanged rules reported a change", i+2)
		}
	}
	if txs := w.since(t); len(txs) != 0 {
		t.Errorf("unchanged Ensure committed %d transactions, want none", len(txs))
	}
	if after := handles(kernelRules(t, conn, false)); !slices.Equal(after, before4) {
		t.Errorf("ip rule handles went from %v to %v", before4, after)
	}
	if after := handles(kernelRules(t, conn, true)); !slices.Equal(after, before6) {
		t.Errorf("ip6 rule handles went from %v to %v", before6, after)
	}
}

func TestEnsureSubnetChangeIsOneTransaction(t *testing.T) {
	needRoot(t)
	m, conn, ns := newTestManager(t)
	ensure(t, m, rulesV4())
	before := handles(kernelRules(t, conn, false))
	w := watchTransactions(t, ns)
	w.since(t)

	r := rulesV4()
	r.Subnet = pfx("10.244.7.0/24")
	if !ensure(t, m, r) {
		t.Fatal("Ensure with a new subnet reported no change")
	}
	txs := w.since(t)
	if len(txs) != 1 {
		t.Fatalf("subnet change committed %d transactions, want 1", len(txs))
	}
	var dels, adds int
	for _, ev := range txs[0].Changes {
		switch ev.Type {
		case nftables.MonitorEventTypeDelRule:
			dels++
		case nftables.MonitorEventTypeNewRule:
			adds++
		default:
			t.Errorf("subnet change also did %v, want only rule changes", ev.Type)
		}
	}
	if dels != len(before) || adds != len(before) {
		t.Errorf("transaction deleted %d and added %d rules, want %d and %d", dels, adds, len(before), len(before))
	}
	assertProgrammed(t, conn, r, false)
	after := handles(kernelRules(t, conn, false))
	for _, h := range after {
		if slices.Contains(before, h) {
			t.Errorf("handle %d survived the replacement: before %v, after %v", h, before, after)
		}
	}

	if ensure(t, m, r) {
		t.Error("Ensure after the change reported another change")
	}
	if again := handles(kernelRules(t, conn, false)); !slices.Equal(again, after) {
		t.Errorf("handles moved from %v to %v without a change", after, again)
	}
}

func TestEnsureRestoresDeletedRule(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	ensure(t, m, rulesV4())
	rules := kernelRules(t, conn, false)
	if err := conn.DelRule(rules[2]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatalf("deleting rule 3 by hand: %v", err)
	}
	if !ensure(t, m, rulesV4()) {
		t.Fatal("Ensure after a rule was deleted reported no change")
	}
	assertProgrammed(t, conn, rulesV4(), false)
	if ensure(t, m, rulesV4()) {
		t.Error("second Ensure reported a change")
	}
}

func TestEnsureReplacesForeignAndEditedRules(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	ensure(t, m, rulesV4())
	rules := kernelRules(t, conn, false)

	// A rule inserted by hand at the top that would masquerade everything.
	conn.InsertRule(&nftables.Rule{Table: weftTable(false), Chain: &nftables.Chain{Name: ChainName}, Exprs: familyOf(false).mustEncode(ruleSpec{action: actMasquerade})})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if !ensure(t, m, rulesV4()) {
		t.Fatal("Ensure with a foreign rule reported no change")
	}
	assertProgrammed(t, conn, rulesV4(), false)

	// A weft rule whose comment was edited but whose expressions are intact.
	rules = kernelRules(t, conn, false)
	edited := *rules[1]
	edited.Table, edited.Chain = weftTable(false), &nftables.Chain{Name: ChainName}
	edited.UserData = appendComment(nil, "weft masq: edited")
	conn.ReplaceRule(&edited)
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if !ensure(t, m, rulesV4()) {
		t.Fatal("Ensure with an edited comment reported no change")
	}
	assertProgrammed(t, conn, rulesV4(), false)
}

// mustEncode returns only the expressions of a rule, for tests that write
// rules by hand.
func (f family) mustEncode(s ruleSpec) []expr.Any {
	e, _ := f.encode(s)
	return e
}

func TestEnsureFixesWrongChain(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	table := conn.AddTable(weftTable(false))
	accept := nftables.ChainPolicyAccept
	chain := conn.AddChain(&nftables.Chain{
		Name: ChainName, Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityFilter, Policy: &accept,
	})
	conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: familyOf(false).mustEncode(ruleSpec{action: actReturn})})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if !ensure(t, m, rulesV4()) {
		t.Fatal("Ensure over a filter chain reported no change")
	}
	assertProgrammed(t, conn, rulesV4(), false)
	if ensure(t, m, rulesV4()) {
		t.Error("second Ensure reported a change")
	}
}

// A table made dormant by hand carries no traffic; Ensure must wake it
// without touching its chain or rules.
func TestEnsureWakesDormantTable(t *testing.T) {
	needRoot(t)
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft to make a table dormant (github.com/google/nftables cannot set table flags)")
	}
	m, conn, ns := newTestManager(t)
	ensure(t, m, rulesV4())
	before := handles(kernelRules(t, conn, false))
	if err := inNetNS(ns, func() error {
		out, err := exec.Command("nft", "add", "table", "ip", TableName, "{ flags dormant; }").CombinedOutput()
		if err != nil {
			t.Logf("nft: %s", out)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !ensure(t, m, rulesV4()) {
		t.Fatal("Ensure on a dormant table reported no change")
	}
	out, _ := nftList(t, ns, "ip")
	if strings.Contains(out, "dormant") {
		t.Errorf("table still dormant:\n%s", out)
	}
	assertProgrammed(t, conn, rulesV4(), false)
	if ensure(t, m, rulesV4()) {
		t.Error("second Ensure reported a change")
	}
	if after := handles(kernelRules(t, conn, false)); !slices.Equal(after, before) {
		t.Errorf("waking the table replaced its rules: handles %v, then %v", before, after)
	}
}

func TestEnsureDisabledFamily(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	ensure(t, m, rulesDual())
	// Someone else's chain in weft's ip table, which weft must leave alone.
	conn.AddChain(&nftables.Chain{Name: "other", Table: weftTable(false)})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	before4 := handles(kernelRules(t, conn, false))

	if !ensure(t, m, rulesV4()) {
		t.Fatal("disabling IPv6 reported no change")
	}
	if tableExists(t, conn, TableName, true) {
		t.Error("ip6 table of a disabled family still exists")
	}
	if after := handles(kernelRules(t, conn, false)); !slices.Equal(after, before4) {
		t.Errorf("disabling IPv6 touched IPv4: handles %v, then %v", before4, after)
	}

	// Disabling IPv4 keeps its table, which still holds the other chain.
	if !ensure(t, m, Rules{IPv6Network: pfx("fd00:10:244::/56"), IPv6Subnet: pfx("fd00:10:244:1::/64")}) {
		t.Fatal("switching to IPv6 only reported no change")
	}
	if got := chainNames(t, conn, false); !slices.Equal(got, []string{"other"}) {
		t.Errorf("ip table holds chains %v, want only [other]", got)
	}
	assertProgrammed(t, conn, rulesDual(), true)
	if ensure(t, m, Rules{IPv6Network: pfx("fd00:10:244::/56"), IPv6Subnet: pfx("fd00:10:244:1::/64")}) {
		t.Error("second Ensure reported a change")
	}
}

func TestEnsureInvalidRulesTouchNothing(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	ensure(t, m, rulesV4())
	before := handles(kernelRules(t, conn, false))
	changed, err := ensureBoth(m, Rules{Network: pfx("10.244.0.0/16"), Subnet: pfx("10.99.0.0/24")})
	if err == nil || changed {
		t.Fatalf("Ensure with a subnet outside the network: changed=%v err=%v, want an error", changed, err)
	}
	if after := handles(kernelRules(t, conn, false)); !slices.Equal(after, before) {
		t.Errorf("an invalid Ensure changed handles %v to %v", before, after)
	}
}

func TestRemove(t *testing.T) {
	needRoot(t)
	m, conn, _ := newTestManager(t)
	ensure(t, m, rulesDual())
	conn.AddTable(&nftables.Table{Name: "not-weft", Family: nftables.TableFamilyIPv4})
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := m.Remove(); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	for _, v6 := range []bool{false, true} {
		if tableExists(t, conn, TableName, v6) {
			t.Errorf("%s table %s still exists after Remove", familyOf(v6).name, TableName)
		}
	}
	if !tableExists(t, conn, "not-weft", false) {
		t.Error("Remove deleted a table that is not weft's")
	}
	if err := m.Remove(); err != nil {
		t.Errorf("Remove with nothing to remove: %v", err)
	}
	if !ensure(t, m, rulesDual()) {
		t.Error("Ensure after Remove reported no change")
	}
	assertProgrammed(t, conn, rulesDual(), false)
}

// TestEnsureNotFullyRandom: --ip-masq-fully-random-disable's rules masquerade without
// fully-random, and switching either way rewrites the chain (a rule of the other kind is
// drift, not a match).
func TestEnsureNotFullyRandom(t *testing.T) {
	needRoot(t)
	m, conn, ns := newTestManager(t)
	plain := rulesDual()
	plain.NotFullyRandom = true
	if !ensure(t, m, plain) {
		t.Fatal("first Ensure reported no change")
	}
	assertProgrammed(t, conn, plain, false)
	assertProgrammed(t, conn, plain, true)
	if ensure(t, m, plain) {
		t.Error("a second Ensure of the same rules changed something")
	}
	if out, ok := nftList(t, ns, "ip"); ok {
		if strings.Contains(out, "fully-random") || !strings.Contains(out, `masquerade comment "`+commentToOutside+`"`) {
			t.Errorf("nft list table ip %s, want masquerade without fully-random:\n%s", TableName, out)
		}
	}
	if !ensure(t, m, rulesDual()) {
		t.Fatal("switching to fully-random changed nothing")
	}
	assertProgrammed(t, conn, rulesDual(), false)
	if !ensure(t, m, plain) {
		t.Fatal("switching back changed nothing")
	}
	assertProgrammed(t, conn, plain, true)
}

// assertForward checks weft's forward chain of one family against network's rules, as
// decoded and as nft reads them.
func assertForward(t *testing.T, conn *nftables.Conn, ns netns.NsHandle, network string, v6 bool) {
	t.Helper()
	f := familyOf(v6)
	chain, err := conn.ListChain(weftTable(v6), ForwardChainName)
	if err != nil {
		t.Fatalf("%s: chain %s: %v", f.name, ForwardChainName, err)
	}
	if chain.Type != nftables.ChainTypeFilter || *chain.Hooknum != *nftables.ChainHookForward ||
		*chain.Priority != 0 || chain.Policy == nil || *chain.Policy != nftables.ChainPolicyAccept {
		t.Errorf("%s: chain is type %s hook %d priority %d policy %v, want filter forward 0 accept",
			f.name, chain.Type, *chain.Hooknum, *chain.Priority, chain.Policy)
	}
	rules, err := conn.GetRules(weftTable(v6), &nftables.Chain{Name: ForwardChainName})
	if err != nil {
		t.Fatal(err)
	}
	want := forwardRules(pfx(network))
	if len(rules) != len(want) {
		t.Fatalf("%s: forward chain has %d rules, want %d", f.name, len(rules), len(want))
	}
	for i, r := range rules {
		got, err := f.decode(r.Exprs, r.UserData)
		if err != nil || !got.equal(want[i]) {
			t.Errorf("%s forward rule %d is %s (%v), want %s", f.name, i+1, got, err, want[i])
		}
	}
	out, ok := nftList(t, ns, f.name)
	if !ok {
		t.Log("nft not installed: not cross-checking with nft's reading of the rules")
		return
	}
	for _, line := range []string{
		"chain " + ForwardChainName + " {",
		"type filter hook forward priority filter; policy accept;",
		f.name + " saddr " + network + ` accept comment "` + commentFromPods + `"`,
		f.name + " daddr " + network + ` accept comment "` + commentToPods + `"`,
	} {
		if !strings.Contains(out, line) {
			t.Errorf("nft list table %s %s lacks %q:\n%s", f.name, TableName, line, out)
		}
	}
}

// TestEnsureForward: --iptables-forward-rules' chain in both families, beside the
// masquerade or alone; repaired when edited; removed (and only it) when the flag is false.
func TestEnsureForward(t *testing.T) {
	needRoot(t)
	m, conn, ns := newTestManager(t)
	fwd := func(network string, v6 bool) bool {
		t.Helper()
		var n netip.Prefix
		if network != "" {
			n = pfx(network)
		}
		changed, err := m.EnsureForward(n, v6)
		if err != nil {
			t.Fatalf("EnsureForward(%q, v6 %t): %v", network, v6, err)
		}
		return changed
	}
	// Without --ip-masq: the forward chain alone.
	if !fwd("10.244.0.0/16", false) || !fwd("fd00:10:244::/56", true) {
		t.Fatal("first EnsureForward reported no change")
	}
	assertForward(t, conn, ns, "10.244.0.0/16", false)
	assertForward(t, conn, ns, "fd00:10:244::/56", true)
	if fwd("10.244.0.0/16", false) || fwd("fd00:10:244::/56", true) {
		t.Error("a second EnsureForward of the same network changed something")
	}

	// With the masquerade beside it, neither touches the other.
	ensure(t, m, rulesDual())
	assertForward(t, conn, ns, "10.244.0.0/16", false)
	if fwd("10.244.0.0/16", false) {
		t.Error("the masquerade's Ensure disturbed the forward chain")
	}
	assertProgrammed(t, conn, rulesDual(), false)

	// A rule deleted by hand is drift, restored.
	rules, err := conn.GetRules(weftTable(false), &nftables.Chain{Name: ForwardChainName})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.DelRule(rules[1]); err != nil {
		t.Fatal(err)
	}
	if err := conn.Flush(); err != nil {
		t.Fatal(err)
	}
	if !fwd("10.244.0.0/16", false) {
		t.Error("a forward rule deleted by hand was not restored")
	}
	assertForward(t, conn, ns, "10.244.0.0/16", false)

	// The flag false: the forward chain goes, the masquerade stays.
	if !fwd("", false) {
		t.Fatal("removing the forward chain reported no change")
	}
	if got := chainNames(t, conn, false); !slices.Equal(got, []string{ChainName}) {
		t.Errorf("ip table holds chains %v, want only [%s]", got, ChainName)
	}
	assertProgrammed(t, conn, rulesDual(), false)
	if out, ok := nftList(t, ns, "ip"); ok && strings.Contains(out, "hook forward") {
		t.Errorf("nft list table ip %s still has a forward chain:\n%s", TableName, out)
	}
	// Alone in its table, the chain goes with the table.
	ensure(t, m, rulesV4())
	if !fwd("", true) {
		t.Fatal("removing the ip6 forward chain reported no change")
	}
	if tableExists(t, conn, TableName, true) {
		t.Error("ip6 table holding nothing but the removed forward chain still exists")
	}
	if fwd("", true) || fwd("", false) {
		t.Error("removing an absent forward chain reported a change")
	}
	if _, err := m.EnsureForward(pfx("10.244.0.0/16"), true); err == nil {
		t.Error("EnsureForward took an IPv4 network for the ip6 table")
	}
}
