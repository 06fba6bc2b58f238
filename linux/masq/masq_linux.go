package masq

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/google/nftables"
)

const (
	// TableName is the name of weft's tables, "table ip weft" and
	// "table ip6 weft".
	TableName = "weft"
	// ChainName is the base chain in TableName that holds the masquerade.
	ChainName = "postrouting"
	// ForwardChainName is the base chain in TableName that accepts the pod network's
	// forwarded traffic (flanneld's --iptables-forward-rules).
	ForwardChainName = "forward"
	// srcnatPriority is nft's "srcnat", where iptables' nat POSTROUTING
	// (and so kube-proxy's masquerade) also runs. The order between chains at
	// one priority does not matter here: weft and kube-proxy never masquerade
	// the same packet (the mark decides), and a return only ends weft's chain.
	srcnatPriority = nftables.ChainPriority(100)
	// filterPriority is nft's "filter", iptables' filter FORWARD's, and flanneld's
	// (nftables mode) for its forward chain.
	filterPriority = nftables.ChainPriority(0)
)

// chainSpec is one of weft's base chains: what it is and which rules it holds.
type chainSpec struct {
	name     string
	typ      nftables.ChainType
	hook     nftables.ChainHook
	priority nftables.ChainPriority
	// what names the chain's content in logs: "masquerade rules", "forward rules".
	what string
}

func masqChain() chainSpec {
	return chainSpec{name: ChainName, typ: nftables.ChainTypeNAT, hook: *nftables.ChainHookPostrouting,
		priority: srcnatPriority, what: "masquerade rules"}
}

func forwardChain() chainSpec {
	return chainSpec{name: ForwardChainName, typ: nftables.ChainTypeFilter, hook: *nftables.ChainHookForward,
		priority: filterPriority, what: "forward rules"}
}

// Manager keeps weft's masquerade tables in one network namespace.
type Manager struct {
	log  *slog.Logger
	conn *nftables.Conn
	// mu serialises the Ensure methods and Remove: a Conn buffers one batch at a time,
	// and two batches interleaved would not be the transactions they are
	// meant to be.
	mu sync.Mutex
}

// New returns a Manager that programs the network namespace conn talks to; a
// nil conn means the current namespace. A conn that is not lasting (the
// default: a netlink socket per operation) suits a daemon best, as nothing
// long-lived can go stale between resyncs.
func New(log *slog.Logger, conn *nftables.Conn) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if conn == nil {
		// Without options nftables.New opens nothing and cannot fail.
		conn, _ = nftables.New()
	}
	return &Manager{log: log, conn: conn}
}

// NewInNetNS returns a Manager for the network namespace behind netnsFd (from
// netns.New, or an open /run/netns/NAME). The fd must stay open as long as the
// Manager is used: every operation opens its netlink socket through it.
func NewInNetNS(log *slog.Logger, netnsFd int) (*Manager, error) {
	conn, err := nftables.New(nftables.WithNetNSFd(netnsFd))
	if err != nil {
		return nil, fmt.Errorf("masq: opening nftables in network namespace fd %d: %w", netnsFd, err)
	}
	return New(log, conn), nil
}

// EnsureFamily makes weft's table of one family (IPv6 if v6) hold exactly the rules for r,
// and reports whether it had to change anything, leaving the other family's rules as they
// are: on a dual-stack node each family's data plane keeps its own. It is meant to be called
// on every resync: when the kernel already holds the wanted rules it only reads. Otherwise
// the chain's content is replaced in one nftables transaction, so no packet ever sees a
// half-written chain, and the table and chain that carry traffic are kept. A family r
// disables loses weft's chain (and its table, if nothing else is in it).
func (m *Manager) EnsureFamily(r Rules, v6 bool) (changed bool, err error) {
	p, err := buildPlan(r)
	if err != nil {
		return false, err
	}
	want := p.v4
	if v6 {
		want = p.v6
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ensureFamily(familyOf(v6), masqChain(), want)
}

// EnsureForward makes weft's forward chain of network's family accept what is forwarded
// from or to network, as flanneld's --iptables-forward-rules does: its nftables mode with
// the same chain and rules, its iptables mode with FLANNEL-FWD. A host whose FORWARD policy
// is drop (Docker sets it) would otherwise drop pod traffic between nodes. An invalid
// network removes the chain of the family v6 says, as when the flag is false: forwarding is
// then the host's rules' business. It reports whether it changed anything.
func (m *Manager) EnsureForward(network netip.Prefix, v6 bool) (changed bool, err error) {
	var want familyPlan
	if network.IsValid() {
		n, err := checkNetwork("Network", network, v6)
		if err != nil {
			return false, err
		}
		want = familyPlan{network: n, rules: forwardRules(n)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ensureFamily(familyOf(v6), forwardChain(), want)
}

// Remove deletes weft's tables, rules and all. It is for explicit teardown
// only: the daemon never calls it on stop, so that a restart does not
// interrupt traffic.
func (m *Manager) Remove() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var deleted []string
	for _, f := range []family{familyOf(false), familyOf(true)} {
		t, err := m.findTable(f)
		if err != nil {
			return err
		}
		if t != nil {
			m.conn.DelTable(t)
			deleted = append(deleted, f.name)
		}
	}
	if len(deleted) == 0 {
		return nil
	}
	if err := m.conn.Flush(); err != nil {
		return fmt.Errorf("masq: deleting table %s of families %v: %w", TableName, deleted, err)
	}
	m.log.Info("masquerade tables deleted", "table", TableName, "families", deleted)
	return nil
}

// current is what the kernel holds of weft's masquerade in one family.
type current struct {
	table  *nftables.Table
	chain  *nftables.Chain  // nil if absent
	others int              // other chains in weft's table, left alone
	rules  []*nftables.Rule // rules of chain
}

func (m *Manager) ensureFamily(f family, spec chainSpec, want familyPlan) (bool, error) {
	cur, err := m.read(f, spec)
	if err != nil {
		return false, err
	}
	if want.rules == nil {
		return m.disable(f, spec, cur)
	}
	tableWhy, chainWhy, rulesWhy := cur.differs(f, spec, want.rules)
	if tableWhy == "" && chainWhy == "" && rulesWhy == "" {
		m.log.Debug(spec.what+" up to date", "family", f.name, "network", want.network, "subnet", want.subnet)
		return false, nil
	}

	table := &nftables.Table{Name: TableName, Family: f.table}
	if tableWhy != "" {
		// Adding an existing table only resets its flags (a dormant table
		// carries no traffic); its chains and rules stay.
		m.conn.AddTable(table)
	}
	chain := spec.wanted(table)
	replaceRules := cur.chain == nil || chainWhy != "" || rulesWhy != ""
	switch {
	case cur.chain == nil:
		m.conn.AddChain(chain)
	case chainWhy != "":
		// A base chain's type and hook cannot be changed in place. Deleting
		// and re-adding it in the same transaction still leaves no moment
		// without a chain.
		m.conn.DelChain(chain)
		m.conn.AddChain(chain)
	case rulesWhy != "":
		m.conn.FlushChain(chain)
	}
	if replaceRules {
		for _, s := range want.rules {
			exprs, udata := f.encode(s)
			m.conn.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: exprs, UserData: udata})
		}
	}
	if err := m.conn.Flush(); err != nil {
		return false, fmt.Errorf("masq: programming chain %s %s %s (network %s, subnet %s): %w",
			f.name, TableName, spec.name, want.network, want.subnet, err)
	}
	m.log.Info(spec.what+" programmed", "family", f.name, "network", want.network, "subnet", want.subnet,
		"reason", strings.Join(slices.DeleteFunc([]string{tableWhy, chainWhy, rulesWhy}, isEmpty), "; "))
	return true, nil
}

// disable removes weft's chain of a family that is not (or no longer) enabled.
func (m *Manager) disable(f family, spec chainSpec, cur current) (bool, error) {
	switch {
	case cur.table == nil:
		return false, nil
	case cur.others == 0:
		// Nothing else lives in weft's table: leave no empty table behind.
		m.conn.DelTable(cur.table)
	case cur.chain != nil:
		m.conn.DelChain(cur.chain)
	default:
		return false, nil
	}
	if err := m.conn.Flush(); err != nil {
		return false, fmt.Errorf("masq: removing the %s of disabled family %s: %w", spec.what, f.name, err)
	}
	m.log.Info(spec.what+" removed", "family", f.name, "chain", spec.name)
	return true, nil
}

// read lists what the kernel holds in weft's table of one family. It uses
// dumps rather than lookups by name because the library hides the ENOENT of a
// missing table or chain inside a formatted error.
func (m *Manager) read(f family, spec chainSpec) (current, error) {
	var cur current
	t, err := m.findTable(f)
	if err != nil || t == nil {
		return cur, err
	}
	cur.table = t
	chains, err := m.conn.ListChainsOfTableFamily(f.table)
	if err != nil {
		return cur, fmt.Errorf("masq: listing %s chains: %w", f.name, err)
	}
	for _, c := range chains {
		if c.Table == nil || c.Table.Name != TableName {
			continue
		}
		if c.Name == spec.name {
			cur.chain = c
		} else {
			cur.others++
		}
	}
	if cur.chain == nil {
		return cur, nil
	}
	cur.rules, err = m.conn.GetRules(t, cur.chain)
	if err != nil {
		return cur, fmt.Errorf("masq: listing the rules of chain %s %s %s: %w", f.name, TableName, spec.name, err)
	}
	return cur, nil
}

func (m *Manager) findTable(f family) (*nftables.Table, error) {
	tables, err := m.conn.ListTablesOfFamily(f.table)
	if err != nil {
		return nil, fmt.Errorf("masq: listing %s tables: %w", f.name, err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			return t, nil
		}
	}
	return nil, nil
}

// differs says why the kernel's table, chain and rules are not the wanted
// ones; an empty reason means that part is right. When the chain is missing or
// wrong its rules are not looked at: they go with it.
func (cur current) differs(f family, spec chainSpec, want []ruleSpec) (table, chain, rules string) {
	switch {
	case cur.table == nil:
		return "table missing", "chain missing", ""
	case cur.table.Flags != 0:
		table = fmt.Sprintf("table has flags %#x", tableFlags(cur.table))
	}
	switch {
	case cur.chain == nil:
		return table, "chain missing", ""
	case !spec.isRight(cur.chain):
		return table, fmt.Sprintf("chain is not type %s hook %d priority %d policy accept", spec.typ, spec.hook, spec.priority), ""
	case len(cur.rules) != len(want):
		return table, "", fmt.Sprintf("chain has %d rules, want %d", len(cur.rules), len(want))
	}
	for i, r := range cur.rules {
		got, err := f.decode(r.Exprs, r.UserData)
		if err != nil {
			return table, "", fmt.Sprintf("rule %d (handle %d): %v", i+1, r.Handle, err)
		}
		if !got.equal(want[i]) {
			return table, "", fmt.Sprintf("rule %d (handle %d) is %q, want %q", i+1, r.Handle, got, want[i])
		}
	}
	return table, "", ""
}

// tableFlags returns a table's flags as the kernel means them. The library
// (v0.3.0) decodes this big-endian attribute in host byte order; undoing that
// here only affects the log line, since any non-zero value is wrong anyway.
func tableFlags(t *nftables.Table) uint32 {
	return binary.BigEndian.Uint32(binary.NativeEndian.AppendUint32(nil, t.Flags))
}

func isEmpty(s string) bool { return s == "" }

// wanted is the chain as weft makes it in t. Its policy is accept, always: a forward chain
// that dropped what it does not accept would cut the node off everything else it forwards.
func (spec chainSpec) wanted(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{
		Name:     spec.name,
		Table:    t,
		Type:     spec.typ,
		Hooknum:  nftables.ChainHookRef(spec.hook),
		Priority: nftables.ChainPriorityRef(spec.priority),
		Policy:   &accept,
	}
}

func (spec chainSpec) isRight(c *nftables.Chain) bool {
	return c.Type == spec.typ &&
		c.Hooknum != nil && *c.Hooknum == spec.hook &&
		c.Priority != nil && *c.Priority == spec.priority &&
		(c.Policy == nil || *c.Policy == nftables.ChainPolicyAccept)
}
