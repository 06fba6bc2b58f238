package policy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"sync"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"

	"github.com/weftnet/weft/netpol"
)

// filterPriority is nft's "filter - 1": before weft's own forward chain (linux/masq, which
// accepts the pod network's traffic) and iptables' FORWARD, though a drop here ends the
// packet whatever chain runs first.
const filterPriority = nftables.ChainPriority(-1)

// Manager keeps weft's policy table in one network namespace.
type Manager struct {
	log  *slog.Logger
	conn *nftables.Conn
	mu   sync.Mutex // one batch at a time on conn

	// written is, per verdict map, the verdict of each key (as a string of its bytes) that
	// this Manager wrote; pending what the batch being built will write.
	written, pending map[string]map[string]*expr.Verdict
	// last is what the kernel holds after the last Ensure or Update that succeeded (nil
	// after one that failed, and after Remove): what Update diffs from.
	last *current
}

// New returns a Manager for the network namespace conn talks to (NewConn's); nil is the
// current one.
func New(log *slog.Logger, conn *nftables.Conn) *Manager {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if conn == nil {
		conn, _ = NewConn() // it opens nothing yet and cannot fail
	}
	return &Manager{log: log, conn: conn, written: map[string]map[string]*expr.Verdict{}}
}

// batchBuffer is the size of the netlink socket's buffers for a transaction. The table of a
// node with hundreds of isolated pods is a batch of megabytes: past the default send buffer
// (net.core.wmem_default, about 200 KiB) the kernel refuses it with EMSGSIZE, and the
// acknowledgements of its messages overflow the default receive buffer (ENOBUFS); google/
// nftables' own tests show both (TestNftablesDeadlock, "send" and "recv").
const batchBuffer = 64 << 20

// NewConn opens nftables as a Manager needs it: with buffers for a transaction of the
// whole table. opts are nftables.New's (nftables.WithNetNSFd).
func NewConn(opts ...nftables.ConnOption) (*nftables.Conn, error) {
	return nftables.New(append(opts, nftables.WithSockOptions(bigBuffers))...)
}

// bigBuffers sets a netlink socket's buffers to batchBuffer: forced past net.core.[rw]mem_max
// (weftd has CAP_NET_ADMIN), or as large as those allow.
func bigBuffers(c *netlink.Conn) error {
	raw, err := c.SyscallConn()
	if err != nil {
		return err
	}
	var forced error
	if err := raw.Control(func(fd uintptr) {
		forced = errors.Join(unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, batchBuffer),
			unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, batchBuffer))
	}); err != nil {
		return err
	}
	if forced != nil {
		return errors.Join(c.SetWriteBuffer(batchBuffer), c.SetReadBuffer(batchBuffer))
	}
	return nil
}

// Changes counts what one Ensure wrote, by kind.
type Changes struct {
	Table, Chains, Rules, Sets, Elements, Deleted int
}

// Any reports whether anything was written.
func (c Changes) Any() bool { return c != Changes{} }

func (c Changes) String() string {
	return fmt.Sprintf("table %d, chains %d, rules %d, sets %d, elements %d, deleted %d",
		c.Table, c.Chains, c.Rules, c.Sets, c.Elements, c.Deleted)
}

// Ensure makes the kernel's policy table be want, writing only what differs, in one
// transaction; when the kernel holds want already it only reads. It repairs drift the same
// way: a rule, element, set or chain deleted or changed by hand is written again. Its cost
// grows with the table: it reads all of it.
func (m *Manager) Ensure(want Table) (Changes, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = nil
	cur, err := m.read()
	if err != nil {
		return Changes{}, err
	}
	return m.ensure(want, cur)
}

// Update is Ensure for a change: it writes what differs between want and the table the
// Manager last wrote or read, without reading the kernel (its cost grows with the change,
// not with the table), or is Ensure when it has none. It does not see drift: Ensure does.
func (m *Manager) Update(want Table) (Changes, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.last
	m.last = nil
	if cur == nil {
		read, err := m.read()
		if err != nil {
			return Changes{}, err
		}
		cur = &read
	} else {
		cur.remade = nil
	}
	return m.ensure(want, *cur)
}

// ensure writes what want needs beyond cur; on success the kernel holds want, which
// becomes m.last.
func (m *Manager) ensure(want Table, cur current) (Changes, error) {
	m.pending = map[string]map[string]*expr.Verdict{}
	var ch Changes
	table := &nftables.Table{Name: TableName, Family: nftables.TableFamilyINet}
	if cur.table == nil {
		m.conn.AddTable(table)
		ch.Table++
	}
	sets := map[string]*nftables.Set{} // every wanted set and map, as rules refer to them

	// Sets and maps: a missing one is made with its elements (maps' after the chains they
	// jump to); an existing one gets the elements it lacks and loses those it should not have.
	for _, name := range slices.Sorted(maps.Keys(want.Sets)) {
		ws := want.Sets[name]
		s, have := cur.sets[name]
		if have && (s.Interval != ws.Interval || s.KeyType.Name != keyType(ws.V6).Name || s.IsMap) {
			m.log.Warn("policy set of the wrong shape: made again", "set", name, "interval", s.Interval, "key", s.KeyType.Name, "map", s.IsMap)
			m.conn.DelSet(s) // wrong shape: remade below (its rules are rewritten too)
			ch.Deleted++
			have = false
			cur.remade = append(cur.remade, name)
		}
		if !have {
			s = &nftables.Set{Table: table, Name: name, KeyType: keyType(ws.V6), Interval: ws.Interval}
			if err := m.conn.AddSet(s, setElements(ws)); err != nil {
				return Changes{}, fmt.Errorf("policy: adding set %s: %w", name, err)
			}
			ch.Sets++
			ch.Elements += len(ws.Elems)
			sets[name] = s
			continue
		}
		sets[name] = s
		if last, ok := cur.wantSets[name]; ok && last.V6 == ws.V6 && last.Interval == ws.Interval && slices.Equal(last.Elems, ws.Elems) {
			continue // as the last write left it
		}
		n, err := m.syncElements(s, cur.elemsOf(name), setElements(ws))
		if err != nil {
			return Changes{}, err
		}
		ch.Elements += n
	}
	for _, name := range slices.Sorted(maps.Keys(want.Maps)) {
		wm := want.Maps[name]
		s, have := cur.sets[name]
		// Only whether it is a map is compared: the library (v0.3.0) reads a verdict map's
		// data type into its KeyType. A map of the wrong key type fails to take elements.
		if have && !s.IsMap {
			m.log.Warn("policy map of the wrong shape: made again", "map", name)
			m.conn.DelSet(s)
			ch.Deleted++
			have = false
			cur.remade = append(cur.remade, name)
		}
		if !have {
			delete(m.written, name)
			s = &nftables.Set{Table: table, Name: name, KeyType: keyType(wm.V6), IsMap: true, DataType: nftables.TypeVerdict}
			if err := m.conn.AddSet(s, nil); err != nil {
				return Changes{}, fmt.Errorf("policy: adding map %s: %w", name, err)
			}
			ch.Sets++
			delete(cur.elems, name)
			delete(cur.wantMaps, name)
		}
		sets[name] = s
	}

	// The pods' chains: a missing chain is made, one whose rules differ is flushed and
	// written again (as is one whose sets were remade).
	for _, name := range slices.Sorted(maps.Keys(want.Chains)) {
		rules := want.Chains[name]
		c, have := cur.chains[name]
		if !have {
			c = m.conn.AddChain(&nftables.Chain{Name: name, Table: table})
			ch.Chains++
		} else if cur.sameRules(name, rules) && !cur.refersToRemade(rules) {
			continue
		} else {
			m.conn.FlushChain(c)
		}
		for _, r := range rules {
			exprs, err := ruleExprs(r, sets)
			if err != nil {
				return Changes{}, fmt.Errorf("policy: chain %s: %w", name, err)
			}
			m.conn.AddRule(&nftables.Rule{Table: table, Chain: c, Exprs: exprs, UserData: comment(r.String())})
			ch.Rules++
		}
	}

	// The maps' elements, now that their chains exist.
	for _, name := range slices.Sorted(maps.Keys(want.Maps)) {
		if last, ok := cur.wantMaps[name]; ok && last.V6 == want.Maps[name].V6 && maps.Equal(last.Elems, want.Maps[name].Elems) {
			continue
		}
		n, err := m.syncElements(sets[name], cur.elemsOf(name), mapElements(want.Maps[name]))
		if err != nil {
			return Changes{}, err
		}
		ch.Elements += n
	}

	// The forward chain.
	base := want.BaseRules()
	baseStrings := make([]string, len(base))
	for i, r := range base {
		baseStrings[i] = r.String()
	}
	bc, have := cur.chains[baseChain]
	switch {
	case have && !isBase(bc):
		m.conn.DelChain(bc)
		ch.Deleted++
		have = false
		fallthrough
	case !have:
		bc = m.conn.AddChain(baseChainOf(table))
		ch.Chains++
		cur.rules[baseChain] = nil
	}
	if !slices.Equal(cur.rules[baseChain], baseStrings) || len(cur.remade) > 0 {
		if have {
			m.conn.FlushChain(bc)
		}
		for _, r := range base {
			exprs, err := baseExprs(r, sets)
			if err != nil {
				return Changes{}, err
			}
			m.conn.AddRule(&nftables.Rule{Table: table, Chain: bc, Exprs: exprs, UserData: comment(r.String())})
			ch.Rules++
		}
	}

	// What is no longer wanted: chains (their map elements are gone above), then sets.
	for _, name := range slices.Sorted(maps.Keys(cur.chains)) {
		if _, ok := want.Chains[name]; !ok && name != baseChain {
			m.conn.FlushChain(cur.chains[name])
			m.conn.DelChain(cur.chains[name])
			ch.Deleted++
		}
	}
	for _, name := range slices.Sorted(maps.Keys(cur.sets)) {
		_, isSet := want.Sets[name]
		_, isMap := want.Maps[name]
		if !isSet && !isMap {
			m.conn.DelSet(cur.sets[name])
			ch.Deleted++
		}
	}
	if !ch.Any() {
		m.last = held(want, table)
		return ch, nil
	}
	for name := range m.written {
		if _, ok := want.Maps[name]; !ok {
			delete(m.written, name)
		}
	}
	if err := m.conn.Flush(); err != nil {
		return Changes{}, fmt.Errorf("policy: writing table inet %s (%s): %w", TableName, ch, err)
	}
	maps.Copy(m.written, m.pending)
	m.last = held(want, table)
	return ch, nil
}

// held is what the kernel holds once it holds want, for Update: the objects by name (the
// kernel finds a set, chain or map by its name) and want itself, whose parts ensure compares
// with what it is asked for next, and whose elements it encodes only for a set that changed.
// Its cost grows with the number of chains and sets, not with their contents.
func held(want Table, table *nftables.Table) *current {
	cur := &current{table: table, chains: map[string]*nftables.Chain{}, rules: map[string][]string{},
		sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{},
		wantSets: want.Sets, wantMaps: want.Maps, wantChains: want.Chains}
	for name := range want.Chains {
		cur.chains[name] = &nftables.Chain{Name: name, Table: table}
	}
	cur.chains[baseChain] = baseChainOf(table)
	for _, r := range want.BaseRules() {
		cur.rules[baseChain] = append(cur.rules[baseChain], r.String())
	}
	for name, ws := range want.Sets {
		cur.sets[name] = &nftables.Set{Table: table, Name: name, KeyType: keyType(ws.V6), Interval: ws.Interval}
	}
	for name, wm := range want.Maps {
		cur.sets[name] = &nftables.Set{Table: table, Name: name, KeyType: keyType(wm.V6), IsMap: true, DataType: nftables.TypeVerdict}
	}
	return cur
}

// Remove deletes the policy table. The daemon calls it only when policy is turned off,
// never on stop.
func (m *Manager) Remove() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = nil
	t, err := m.conn.ListTableOfFamily(TableName, nftables.TableFamilyINet)
	if err != nil || t == nil {
		return nil // no table (the library hides ENOENT in its error)
	}
	m.conn.DelTable(t)
	if err := m.conn.Flush(); err != nil {
		return fmt.Errorf("policy: deleting table inet %s: %w", TableName, err)
	}
	return nil
}

// current is what the kernel holds of the policy table.
type current struct {
	table  *nftables.Table
	chains map[string]*nftables.Chain
	rules  map[string][]string // each chain's rules by their comment, "" where there is none
	sets   map[string]*nftables.Set
	elems  map[string][]nftables.SetElement
	remade []string // sets deleted to be made again in this transaction
	// The parts of the Table the Manager last wrote, when the current is held's rather than
	// read's: a set, map or chain held so is as its last write left it.
	wantSets   map[string]Set
	wantMaps   map[string]VMap
	wantChains map[string][]Rule
}

// elemsOf is the elements of the set or map name: as read, or as held's last write.
func (cur current) elemsOf(name string) []nftables.SetElement {
	if e, ok := cur.elems[name]; ok {
		return e
	}
	if ws, ok := cur.wantSets[name]; ok {
		return setElements(ws)
	}
	if wm, ok := cur.wantMaps[name]; ok {
		return mapElements(wm)
	}
	return nil
}

// sameRules reports whether the chain name holds rules.
func (cur current) sameRules(name string, rules []Rule) bool {
	if last, ok := cur.wantChains[name]; ok {
		return slices.EqualFunc(last, rules, func(a, b Rule) bool {
			return a.V6 == b.V6 && a.Dir == b.Dir && a.PeerSet == b.PeerSet && a.Verdict == b.Verdict &&
				(a.Port == b.Port || a.Port != nil && b.Port != nil && *a.Port == *b.Port)
		})
	}
	return slices.Equal(cur.rules[name], ruleStrings(rules))
}

// refersToRemade reports whether one of rules looks up a set remade in this transaction.
func (cur current) refersToRemade(rules []Rule) bool {
	for _, r := range rules {
		if r.PeerSet != "" && slices.Contains(cur.remade, r.PeerSet) {
			return true
		}
	}
	return false
}

func (m *Manager) read() (current, error) {
	cur := current{chains: map[string]*nftables.Chain{}, rules: map[string][]string{},
		sets: map[string]*nftables.Set{}, elems: map[string][]nftables.SetElement{}}
	tables, err := m.conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return cur, fmt.Errorf("policy: listing inet tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			cur.table = t
		}
	}
	if cur.table == nil {
		return cur, nil
	}
	chains, err := m.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return cur, fmt.Errorf("policy: listing inet chains: %w", err)
	}
	for _, c := range chains {
		if c.Table == nil || c.Table.Name != TableName {
			continue
		}
		cur.chains[c.Name] = c
		rules, err := m.conn.GetRules(cur.table, c)
		if err != nil {
			return cur, fmt.Errorf("policy: listing the rules of chain %s: %w", c.Name, err)
		}
		for _, r := range rules {
			s, _ := userdata.GetString(r.UserData, userdata.TypeComment)
			cur.rules[c.Name] = append(cur.rules[c.Name], s)
		}
	}
	sets, err := m.conn.GetSets(cur.table)
	if err != nil {
		return cur, fmt.Errorf("policy: listing the sets of table %s: %w", TableName, err)
	}
	for _, s := range sets {
		cur.sets[s.Name] = s
		el, err := m.conn.GetSetElements(s)
		if err != nil {
			return cur, fmt.Errorf("policy: listing the elements of set %s: %w", s.Name, err)
		}
		cur.elems[s.Name] = el
	}
	return cur, nil
}

// syncElements deletes from s what have has and want lacks, then adds what want has and
// have lacks, and returns how many elements it wrote. An interval set's ranges are pairs of a
// start and an interval end, compared one element at a time like any other: a range that
// grows rewrites its end, not the set. A verdict map's elements are compared with what this
// Manager wrote (written): the library cannot read a verdict back.
func (m *Manager) syncElements(s *nftables.Set, have, want []nftables.SetElement) (int, error) {
	written := m.written[s.Name]
	hk := map[string]nftables.SetElement{}
	for _, e := range have {
		if s.IsMap {
			e.VerdictData = written[string(e.Key)]
		}
		hk[elemKey(e)] = e
	}
	wk := map[string]bool{}
	var add []nftables.SetElement
	for _, e := range want {
		wk[elemKey(e)] = true
		if _, ok := hk[elemKey(e)]; !ok {
			add = append(add, e)
		}
	}
	var del []nftables.SetElement
	for k, e := range hk {
		if !wk[k] {
			del = append(del, nftables.SetElement{Key: e.Key, IntervalEnd: e.IntervalEnd})
		}
	}
	if len(add) == 0 && len(del) == 0 {
		return 0, nil
	}
	slices.SortFunc(del, func(a, b nftables.SetElement) int { return bytes.Compare(a.Key, b.Key) })
	if len(del) > 0 {
		if err := m.conn.SetDeleteElements(s, del); err != nil {
			return 0, fmt.Errorf("policy: deleting %d elements of %s: %w", len(del), s.Name, err)
		}
	}
	if len(add) > 0 {
		if err := m.conn.SetAddElements(s, add); err != nil {
			return 0, fmt.Errorf("policy: adding %d elements to %s: %w", len(add), s.Name, err)
		}
	}
	if s.IsMap {
		next := map[string]*expr.Verdict{}
		for _, e := range want {
			next[string(e.Key)] = e.VerdictData
		}
		m.pending[s.Name] = next
	}
	return len(add) + len(del), nil
}

// elemKey identifies an element with its value: a verdict map's element that jumps
// elsewhere is another element.
func elemKey(e nftables.SetElement) string {
	k := fmt.Sprintf("%x/%t", e.Key, e.IntervalEnd)
	if v := e.VerdictData; v != nil {
		k += fmt.Sprintf("/%d/%s", v.Kind, v.Chain)
	}
	return k
}

func keyType(v6 bool) nftables.SetDatatype {
	if v6 {
		return nftables.TypeIP6Addr
	}
	return nftables.TypeIPAddr
}

// setElements is a set's elements as the kernel holds them: an interval set's range is its
// first address and, unless it runs to the family's last address, an interval end at the
// address after its last.
func setElements(s Set) []nftables.SetElement {
	var out []nftables.SetElement
	for _, r := range s.Elems {
		out = append(out, nftables.SetElement{Key: r.From.AsSlice()})
		if !s.Interval {
			continue
		}
		if next := r.To.Next(); next.IsValid() {
			out = append(out, nftables.SetElement{Key: next.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

func mapElements(vm VMap) []nftables.SetElement {
	out := make([]nftables.SetElement, 0, len(vm.Elems))
	for _, a := range slices.SortedFunc(maps.Keys(vm.Elems), netip.Addr.Compare) {
		out = append(out, nftables.SetElement{Key: a.AsSlice(),
			VerdictData: &expr.Verdict{Kind: expr.VerdictJump, Chain: vm.Elems[a]}})
	}
	return out
}

func comment(s string) []byte { return userdata.AppendString(nil, userdata.TypeComment, s) }

func ruleStrings(rules []Rule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = r.String()
	}
	return out
}

func baseChainOf(t *nftables.Table) *nftables.Chain {
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: baseChain, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(filterPriority), Policy: &accept}
}

func isBase(c *nftables.Chain) bool {
	return c.Type == nftables.ChainTypeFilter && c.Hooknum != nil && *c.Hooknum == *nftables.ChainHookForward &&
		c.Priority != nil && *c.Priority == filterPriority && (c.Policy == nil || *c.Policy == nftables.ChainPolicyAccept)
}

// The expressions rules are made of. Register 1 holds what is compared.

func nfproto(v6 bool) []expr.Any {
	p := byte(unix.NFPROTO_IPV4)
	if v6 {
		p = unix.NFPROTO_IPV6
	}
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{p}}}
}

// loadAddr loads the source (src) or destination address of family v6's header.
func loadAddr(v6, src bool) expr.Any {
	off, n := uint32(16), uint32(4)
	switch {
	case v6 && src:
		off, n = 8, 16
	case v6:
		off, n = 24, 16
	case src:
		off = 12
	}
	return &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n}
}

func lookup(sets map[string]*nftables.Set, name string, invert, vmap bool) (expr.Any, error) {
	s, ok := sets[name]
	if !ok {
		return nil, fmt.Errorf("set %s is not in the table", name)
	}
	return &expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: invert, IsDestRegSet: vmap}, nil
}

var protoNumbers = map[netpol.Protocol]byte{netpol.TCP: unix.IPPROTO_TCP, netpol.UDP: unix.IPPROTO_UDP, netpol.SCTP: unix.IPPROTO_SCTP}

func ruleExprs(r Rule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	if r.Verdict == "drop" {
		return []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}, nil
	}
	out := nfproto(r.V6)
	if r.PeerSet != "" {
		l, err := lookup(sets, r.PeerSet, false, false)
		if err != nil {
			return nil, err
		}
		out = append(out, loadAddr(r.V6, r.Dir == "in"), l)
	}
	if p := r.Port; p != nil {
		proto, ok := protoNumbers[p.Protocol]
		if !ok {
			return nil, fmt.Errorf("protocol %q", p.Protocol)
		}
		out = append(out, &expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}})
		if p.From != 0 {
			out = append(out, &expr.Payload{OperationType: expr.PayloadLoad, DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2})
			if p.To <= p.From {
				out = append(out, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binary.BigEndian.AppendUint16(nil, p.From)})
			} else {
				out = append(out, &expr.Range{Op: expr.CmpOpEq, Register: 1,
					FromData: binary.BigEndian.AppendUint16(nil, p.From), ToData: binary.BigEndian.AppendUint16(nil, p.To)})
			}
		}
	}
	return append(out, &expr.Verdict{Kind: expr.VerdictReturn}), nil
}

func baseExprs(r BaseRule, sets map[string]*nftables.Set) ([]expr.Any, error) {
	f := famSuffix(r.V6)
	switch r.Kind {
	case BaseEstablished:
		mask := binary.NativeEndian.AppendUint32(nil, expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED)
		return []expr.Any{&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
			&expr.Verdict{Kind: expr.VerdictAccept}}, nil
	case BaseUnknownDst, BaseUnknownSrc:
		src := r.Kind == BaseUnknownSrc
		l, err := lookup(sets, podsSet+f, true, false)
		if err != nil {
			return nil, err
		}
		bits := r.Subnet.Addr().BitLen()
		n := uint32(bits / 8)
		return append(nfproto(r.V6), loadAddr(r.V6, src),
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n, Mask: net.CIDRMask(r.Subnet.Bits(), bits), Xor: make([]byte, n)},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: r.Subnet.Masked().Addr().AsSlice()},
			loadAddr(r.V6, src), l, &expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}), nil
	case BaseIngress, BaseEgress:
		name := ingress + f
		if r.Kind == BaseEgress {
			name = egress + f
		}
		l, err := lookup(sets, name, false, true)
		if err != nil {
			return nil, err
		}
		return append(nfproto(r.V6), loadAddr(r.V6, r.Kind == BaseEgress), l), nil
	}
	return nil, fmt.Errorf("policy: unknown base rule kind %q", r.Kind)
}

// Options implements daemon.PolicyPlane: nftables matches SCTP ports (th dport) as it
// matches TCP's and UDP's.
func (m *Manager) Options() netpol.Options { return netpol.Options{SCTP: true} }

// Enforce is Ensure (full: reading the kernel, which repairs drift) or Update of the table
// for rules on a node whose pod subnets are subnets (daemon.PolicyPlane): it returns what it
// wrote, "" when nothing.
func (m *Manager) Enforce(rules netpol.Rules, subnets []netip.Prefix, full bool) (string, error) {
	ensure := m.Update
	if full {
		ensure = m.Ensure
	}
	ch, err := ensure(Build(rules, subnets))
	if err != nil || !ch.Any() {
		return "", err
	}
	return ch.String(), nil
}
