package etcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"

	"github.com/weftnet/weft/subnet"
)

// Defaults of flanneld.
const (
	DefaultPrefix = "/coreos.com/network"
	DefaultTTL    = 24 * time.Hour
)

// maxAttempts bounds how often one Acquire goes round after losing a race. Each lost race
// means another node got a subnet, so this is only reached when something is badly wrong.
const maxAttempts = 1000

// Options tune a Manager. The zero value is flanneld's behaviour.
type Options struct {
	Prefix string        // key prefix, default DefaultPrefix
	TTL    time.Duration // lifetime of a lease not renewed, default DefaultTTL
	Logger *slog.Logger
	// OnSkip is called for every lease in etcd that cannot be used (a malformed key or
	// value), once per version of it, after it has been logged. Metrics hook in here.
	OnSkip func(key string, err error)
	// OnWatchRestart is called when the watch broke and is about to resume; OnRelist when it
	// lost history and lists the leases again.
	OnWatchRestart func(err error)
	OnRelist       func()
	// RevisionCheck is how often the watch reads etcd's revision (one count-only read) to
	// notice an etcd restored from a backup, whose revision is behind the watch's: the
	// client's own reconnection follows it from the old, now future, revision and reports
	// nothing, not even progress notifications. Default 30 s.
	RevisionCheck time.Duration
	// RequestTimeout bounds one request to etcd, and ListTimeout one whose answer holds every
	// lease (a listing, a transaction that lists when it fails), which at tens of thousands of
	// leases is megabytes: a request to a member that hangs (frozen, or behind a path that
	// drops packets) fails then, and is retried, instead of holding its caller for the caller's
	// whole deadline. Defaults DefaultRequestTimeout and DefaultListTimeout.
	RequestTimeout time.Duration
	ListTimeout    time.Duration
	// ListPage is how many leases one response of a listing holds at most, default
	// DefaultListPage.
	ListPage int
}

// Default deadlines of one request (Options.RequestTimeout, ListTimeout): a request that
// needs the leader waits out an election (about a second) well within them.
const (
	DefaultRequestTimeout = 10 * time.Second
	DefaultListTimeout    = time.Minute
)

// Manager is a subnet.Manager on etcd v3.
type Manager struct {
	cli    *clientv3.Client
	prefix string
	ttl    time.Duration
	log    *slog.Logger
	opts   Options
	seed   maphash.Seed // of the digests of values (entry.digest, the watch's)

	// handoff is the listing of the leases that the first Acquire made, for the first Watch
	// to start from: at start-up one listing of thousands of leases, parsed once, serves
	// both. Once a Watch started, listings are no longer kept.
	mu       sync.Mutex
	handoff  *listing
	watching bool
	// watchErr is why the lease watch failed last, until it runs again; Check reports it.
	watchErr error
	// ownKey is the key of the lease Acquire or Renew last gave this node: the watch never
	// holds back its removal (see watcher.relisted).
	ownKey atomic.Pointer[string]
	// takeovers are, by etcd key, the leases with this node's public IP that this node took
	// over from another node identity (LeaseAttrs.NodeID). Guarded by mu.
	takeovers map[string]takeover

	// The pool (Pool): the config GetConfig read last, and how many subnets of its IPv4
	// and IPv6 ranges hold a key, kept by the watch.
	cfg     atomic.Pointer[subnet.Config]
	leased  [2]atomic.Uint64
	counted atomic.Bool
}

// listing is the leases' key-values as of a revision, each parsed or not (entry.parsed).
type listing struct {
	entries []entry
	// slots, when not nil, hold the parsed entries' leases, the i-th entry's in the i-th
	// slot: the watch's first batch is made of them in place (watcher.relisted), rather than
	// of copies that would double the listing's weight at the start-up's peak.
	slots []subnet.Event
	rev   int64
}

// slot gives e, the next entry of the listing, the next slot for its lease; none when the
// slots are full (a listing longer than its first page said, which one revision rules out):
// the lease is then made apart, as the slots' order must stay the entries'.
func (ls *listing) slot(e *entry) {
	if ls.slots == nil || len(ls.slots) != len(ls.entries) || len(ls.slots) == cap(ls.slots) {
		return
	}
	ls.slots = ls.slots[:len(ls.slots)+1]
	e.lease = &ls.slots[len(ls.slots)-1].Lease
}

var (
	_ subnet.Manager      = (*Manager)(nil)
	_ subnet.Checker      = (*Manager)(nil)
	_ subnet.Prober       = (*Manager)(nil)
	_ subnet.PoolReporter = (*Manager)(nil)
)

// New returns a Manager on cli. The caller keeps ownership of cli.
func New(cli *clientv3.Client, opts Options) *Manager {
	m := &Manager{cli: cli, prefix: strings.TrimSuffix(opts.Prefix, "/"), ttl: opts.TTL, log: opts.Logger, opts: opts, seed: maphash.MakeSeed()}
	if m.prefix == "" {
		m.prefix = DefaultPrefix
	}
	if m.ttl <= 0 {
		m.ttl = DefaultTTL
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	if m.opts.RequestTimeout <= 0 {
		m.opts.RequestTimeout = DefaultRequestTimeout
	}
	if m.opts.ListTimeout <= 0 {
		m.opts.ListTimeout = DefaultListTimeout
	}
	if m.opts.ListPage <= 0 {
		m.opts.ListPage = DefaultListPage
	}
	return m
}

// call runs one request to etcd, f, under a deadline of its own, d (Options.RequestTimeout or
// ListTimeout), within ctx's.
func call[T any](ctx context.Context, d time.Duration, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return f(ctx)
}

// small and large are the deadlines of a request (Options.RequestTimeout) and of one that
// lists the leases (Options.ListTimeout).
func (m *Manager) small() time.Duration { return m.opts.RequestTimeout }
func (m *Manager) large() time.Duration { return m.opts.ListTimeout }

// Check implements subnet.Checker from the state of the client's connection and of the lease
// watch: it costs no request, so it can be asked on every readiness probe. The watch's state
// matters because a connection can be fine while etcd cannot serve: a member that lost its
// quorum still accepts connections, but no request that needs a leader, the watch included
// (it is made with WithRequireLeader).
func (m *Manager) Check() error {
	conn := m.cli.ActiveConnection()
	if conn == nil {
		return errors.New("etcd: no connection")
	}
	switch st := conn.GetState(); st {
	case connectivity.Ready, connectivity.Idle:
	default:
		return fmt.Errorf("etcd: connection to %v is %s", m.cli.Endpoints(), strings.ToLower(st.String()))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.watchErr != nil {
		return fmt.Errorf("etcd: the lease watch cannot run: %w", m.watchErr)
	}
	return nil
}

// Probe implements subnet.Prober: a serializable read of the config key's count, which the
// member the client talks to answers from its own store. A member without a leader answers
// it too: Check reports that, through the watch.
func (m *Manager) Probe(ctx context.Context) error {
	if _, err := m.cli.Get(ctx, m.configKey(), clientv3.WithCountOnly(), clientv3.WithSerializable()); err != nil {
		return fmt.Errorf("etcd: no answer from %v: %w", m.cli.Endpoints(), err)
	}
	return nil
}

// setWatchErr records why the lease watch failed, or with nil that it runs again, for Check.
func (m *Manager) setWatchErr(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watchErr = err
}

func (m *Manager) configKey() string  { return m.prefix + "/config" }
func (m *Manager) subnetsDir() string { return m.prefix + "/subnets/" }

// GetConfig reads and validates <prefix>/config.
func (m *Manager) GetConfig(ctx context.Context) (*subnet.Config, error) {
	resp, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.GetResponse, error) { return m.cli.Get(ctx, m.configKey()) })
	if err != nil {
		return nil, fmt.Errorf("etcd: get %s: %w", m.configKey(), err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("etcd: %s: %w", m.configKey(), subnet.ErrNoConfig)
	}
	cfg, err := subnet.ParseConfig(resp.Kvs[0].Value)
	if err != nil {
		return nil, fmt.Errorf("etcd: %s: %w", m.configKey(), err)
	}
	m.cfg.Store(cfg)
	return cfg, nil
}

// Pool implements subnet.PoolReporter: of each range of the config GetConfig read, how many
// subnets hold a key under <prefix>/subnets/ (a lease, whether or not its value can be read,
// for its key cannot be created again), as of the watch's last batch. A key that is no
// subnet of the range (another length, outside it) is not counted; the allocator's
// subnet.Range.Leased would count what it overlaps.
func (m *Manager) Pool() []subnet.PoolUsage {
	cfg := m.cfg.Load()
	if cfg == nil || !m.counted.Load() {
		return nil
	}
	var out []subnet.PoolUsage
	for i, r := range [2]subnet.Range{cfg.IPv4Range(), cfg.IPv6Range()} {
		if n := r.Size(); n > 0 {
			out = append(out, subnet.PoolUsage{IPv6: i == 1, Total: n, Leased: m.leased[i].Load()})
		}
	}
	return out
}

// entry is one key under <prefix>/subnets/, parsed (lease, valErr) or not yet. It keeps of
// the key-value only what is used later, not the key-value itself: an etcd listing's
// key-values weigh twice what their entries do (at 65,000 leases, 24 MiB), and they would be
// held with the entries until the watch's first batch is made.
type entry struct {
	key     string // the etcd key
	value   []byte // the value's bytes, until it is parsed
	digest  uint64 // of the value's bytes, under Manager.seed: the same bytes again need no parsing
	modRev  int64  // 0: the own lease Acquire created after the listing (see handOwn)
	created int64  // the key's create revision
	leaseID clientv3.LeaseID
	// lease is set once parsed; its Attrs are valid only when valErr is nil. In a listing
	// with slots, the i-th entry's is the i-th slot's (see listing).
	lease  *subnet.Lease
	valErr error // a key that names no subnet, or a bad value
	named  bool  // the key names a subnet
	parsed bool
}

// unparsed is the entry of a key-value, parsed later when needed (parseValue).
func (m *Manager) unparsed(kv *mvccpb.KeyValue) entry {
	return entry{key: string(kv.Key), value: kv.Value, digest: maphash.Bytes(m.seed, kv.Value), modRev: kv.ModRevision,
		created: kv.CreateRevision, leaseID: clientv3.LeaseID(kv.Lease)}
}

// parse turns a key-value into an entry; ok is false when the key names no subnet.
func (m *Manager) parse(kv *mvccpb.KeyValue) (e entry, ok bool) {
	e = m.unparsed(kv)
	m.parseValue(&e)
	return e, e.named
}

// parseValue parses an entry's key and value, unless it was, and drops the value's bytes.
func (m *Manager) parseValue(e *entry) {
	if e.parsed {
		return
	}
	m.parseName(e)
	if e.named {
		if err := e.lease.Attrs.UnmarshalJSON(e.value); err != nil {
			e.valErr = err
		}
	}
	e.value = nil
}

// parseName parses an entry's key: the subnets it names, into its lease (made when the entry
// has none).
func (m *Manager) parseName(e *entry) {
	e.parsed = true
	if e.lease == nil {
		e.lease = new(subnet.Lease)
	}
	e.lease.Created = e.created
	sn, sn6, err := subnet.ParseKey(strings.TrimPrefix(e.key, m.subnetsDir()))
	if err != nil {
		e.valErr = err
		return
	}
	e.lease.Subnet, e.lease.IPv6Subnet, e.named = sn, sn6, true
}

func (m *Manager) parseAll(kvs []*mvccpb.KeyValue) []entry {
	out := make([]entry, 0, len(kvs))
	for _, kv := range kvs {
		if e, ok := m.parse(kv); ok {
			out = append(out, e)
		}
	}
	return out
}

func (m *Manager) listOp() clientv3.Op { return clientv3.OpGet(m.subnetsDir(), clientv3.WithPrefix()) }

// DefaultListPage is how many leases one response of a listing holds at most
// (Options.ListPage).
const DefaultListPage = 5000

// listPages lists the leases, all as of one revision, in responses of Options.ListPage
// key-values at most, each turned into entries (parsed when parse is true) while the next is
// on its way: in one response, at 65,000 leases, 16 MiB of protobuf and then 24 MiB of
// key-values would be held at once, with the entries made of them; asked for one after the
// other's parse, etcd would wait for the parse and the parse for etcd (at 65,000 leases, a
// quarter of a second each). A listing whose revision is compacted away before its last page
// starts again.
func (m *Manager) listPages(ctx context.Context, parse bool) (*listing, error) {
	for {
		ls, err := m.listAt(ctx, parse)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("etcd: list %s: %w", m.subnetsDir(), err)
		}
		return ls, nil
	}
}

// page is a response of a listing, or why there is none.
type page struct {
	resp *clientv3.GetResponse
	err  error
}

// listAt lists the leases from the first page's revision on; see listPages. Each page is
// asked for as soon as the last key of the one before is known, and received before listAt
// returns: no request outlives it.
func (m *Manager) listAt(ctx context.Context, parse bool) (*listing, error) {
	dir := m.subnetsDir()
	end := clientv3.GetPrefixRangeEnd(dir)
	fetch := func(from string, rev int64) <-chan page {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(int64(m.opts.ListPage))}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		next := make(chan page, 1)
		go func() {
			resp, err := call(ctx, m.large(), func(ctx context.Context) (*clientv3.GetResponse, error) { return m.cli.Get(ctx, from, opts...) })
			next <- page{resp, err}
		}()
		return next
	}
	rev := int64(0)
	ls := &listing{}
	for next := fetch(dir, 0); ; {
		p := <-next
		if p.err != nil {
			return nil, p.err
		}
		resp := p.resp
		if rev == 0 {
			// Room for all and one more, the own lease handOwn appends: grown by append,
			// the entries would be copied into a slice of twice their size.
			rev, ls.entries = resp.Header.Revision, make([]entry, 0, resp.Count+1)
			if parse {
				ls.slots = make([]subnet.Event, 0, resp.Count+1)
			}
		}
		more := resp.More && len(resp.Kvs) > 0
		if more {
			next = fetch(string(resp.Kvs[len(resp.Kvs)-1].Key)+"\x00", rev)
		}
		for _, kv := range resp.Kvs {
			e := m.unparsed(kv)
			if parse {
				ls.slot(&e)
				m.parseValue(&e)
			}
			ls.entries = append(ls.entries, e)
		}
		if !more {
			ls.rev = rev
			return ls, nil
		}
	}
}

func (m *Manager) list(ctx context.Context) ([]entry, int64, error) {
	// Parsed once, for the acquisition and the watch's first batch: at 20,000 leases a
	// parse is a fifth of a second. The entries whose key names no subnet stay for the
	// watch, which reports them; the acquisition passes over them.
	ls, err := m.listPages(ctx, true)
	if err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.watching {
		m.handoff = ls
	}
	return ls.entries, ls.rev, nil
}

// handOwn puts the lease Acquire published into the listing it hands off, so that the first
// batch of the Watch holds it; the Watch replays its creation from the listing's revision on,
// and finds nothing new in it.
func (m *Manager) handOwn(l subnet.Lease) {
	value, err := json.Marshal(l.Attrs)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.handoff == nil {
		return
	}
	if err != nil { // cannot happen: attributes always render
		m.handoff = nil
		return
	}
	key := m.subnetsDir() + l.Key()
	own := &mvccpb.KeyValue{Key: []byte(key), Value: value}
	es := m.handoff.entries
	i := slices.IndexFunc(es, func(e entry) bool { return e.key == key })
	if i >= 0 {
		// The key was there at the listing's revision (adopted): it keeps its revisions.
		// A key made since has none: its creation comes through the watch.
		own.CreateRevision, own.ModRevision, own.Lease = es[i].created, es[i].modRev, int64(es[i].leaseID)
	}
	e := m.unparsed(own)
	if i >= 0 {
		// The acquisition that shared the listing is over. The entry keeps its slot.
		if e.lease = es[i].lease; e.lease != nil {
			*e.lease = subnet.Lease{}
		}
		m.parseValue(&e)
		es[i] = e
	} else {
		m.handoff.slot(&e)
		m.parseValue(&e)
		es = append(es, e)
	}
	m.handoff.entries = es
}

// noteOwn notes the node's lease, whose removal the watch never holds back.
func (m *Manager) noteOwn(l subnet.Lease) {
	k := l.Key()
	m.ownKey.Store(&k)
}

// takeover is a lease this node took over from another node identity, from; left once that
// node put its value back: it lives, and this node is a clone of it, which leaves it the lease.
type takeover struct {
	from string
	left bool
}

// noteTakeover notes what this node did with the lease at etcd key.
func (m *Manager) noteTakeover(key string, t takeover) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.takeovers == nil {
		m.takeovers = map[string]takeover{}
	}
	m.takeovers[key] = t
}

// takenOver returns what this node did with the lease at etcd key (zero: nothing).
func (m *Manager) takenOver(key string) takeover {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.takeovers[key]
}

// isOwn reports whether a lease key is the node's own.
func (m *Manager) isOwn(k string) bool {
	own := m.ownKey.Load()
	return own != nil && *own == k
}

// takeListing returns the listing the last Acquire made, once, and keeps none from now on.
func (m *Manager) takeListing() *listing {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.watching = true
	l := m.handoff
	m.handoff = nil
	return l
}

// Acquire implements subnet.Manager.
func (m *Manager) Acquire(ctx context.Context, req subnet.AcquireRequest) (subnet.Lease, error) {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return subnet.Lease{}, err
	}
	if cfg.EnableIPv4 && !req.Attrs.PublicIP.Is4() {
		return subnet.Lease{}, fmt.Errorf("etcd: acquire: IPv4 is enabled but the public IP %q is not IPv4", req.Attrs.PublicIP)
	}
	if cfg.EnableIPv6 && !req.Attrs.PublicIPv6.Is6() {
		return subnet.Lease{}, fmt.Errorf("etcd: acquire: IPv6 is enabled but the public IPv6 %q is not IPv6", req.Attrs.PublicIPv6)
	}
	a := &acquisition{m: m, cfg: cfg, req: req}
	l, err := a.run(ctx)
	if err == nil {
		m.handOwn(l)
		m.noteOwn(l)
	}
	if err != nil && a.grant != 0 {
		// The grant was never bound to a key: give it back instead of leaving it for 24 h.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := m.cli.Revoke(rctx, a.grant); rerr != nil {
			m.log.Warn("revoking an unused etcd lease", "lease", fmt.Sprintf("%x", int64(a.grant)), "err", rerr)
		}
	}
	return l, err
}

// acquisition is one run of Acquire: the config it works under and the etcd lease it
// granted, reused across lost races so that a node never holds more than one.
type acquisition struct {
	m     *Manager
	cfg   *subnet.Config
	req   subnet.AcquireRequest
	grant clientv3.LeaseID
	// rev is the revision of the leases the acquisition picks from (0: unknown): a key
	// created up to it is among them, and no subnet it picks overlaps one.
	rev int64

	prepared      bool // attrs were made by req.Prepare for preparedFor
	preparedFor   [2]netip.Prefix
	preparedAttrs subnet.LeaseAttrs
}

// attrsFor is what the node publishes with a lease on sn and sn6, where the node held held
// (zero for a new lease).
func (a *acquisition) attrsFor(ctx context.Context, sn, sn6 netip.Prefix, held subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
	if a.req.Prepare == nil {
		return a.req.Attrs, nil
	}
	if a.prepared && a.preparedFor == [2]netip.Prefix{sn, sn6} {
		return a.preparedAttrs, nil
	}
	attrs, err := a.req.Prepare(ctx, sn, sn6, held)
	if err != nil {
		return subnet.LeaseAttrs{}, fmt.Errorf("etcd: prepare lease %s: %w", subnet.Key(sn, sn6), err)
	}
	if attrs.PublicIP != a.req.Attrs.PublicIP || attrs.PublicIPv6 != a.req.Attrs.PublicIPv6 {
		return subnet.LeaseAttrs{}, fmt.Errorf("etcd: prepare lease %s changed the public IP", subnet.Key(sn, sn6))
	}
	a.prepared, a.preparedFor, a.preparedAttrs = true, [2]netip.Prefix{sn, sn6}, attrs
	return attrs, nil
}

func (a *acquisition) run(ctx context.Context) (subnet.Lease, error) {
	entries, err := a.list(ctx)
	if err != nil {
		return subnet.Lease{}, err
	}
	for range maxAttempts {
		var (
			l    subnet.Lease
			done bool
			err  error
		)
		if own, ok := a.findOwn(entries); ok {
			l, done, entries, err = a.claim(ctx, own)
		} else {
			l, done, entries, err = a.create(ctx, entries)
		}
		if err != nil || done {
			return l, err
		}
	}
	return subnet.Lease{}, fmt.Errorf("etcd: acquire: lost the race for a subnet %d times", maxAttempts)
}

// isOwn reports whether attrs were published by the node asking: same public address.
func (a *acquisition) isOwn(attrs subnet.LeaseAttrs) bool {
	if a.cfg.EnableIPv4 {
		return attrs.PublicIP == a.req.Attrs.PublicIP
	}
	return attrs.PublicIPv6 == a.req.Attrs.PublicIPv6
}

// findOwn finds the node's lease among entries: of those with its public address, the one
// its node identity published (the node restarted), else one without an identity (flanneld
// published it, or a weftd of old), else one another identity published, which the node
// takes over (it lost its identity with /run at a reboot: the other is likely itself; if
// not, the other puts its value back and this node leaves the lease to it: Renew).
func (a *acquisition) findOwn(entries []entry) (entry, bool) {
	best, rank := entry{}, 0
	for _, e := range entries {
		if e.valErr != nil || !a.isOwn(e.lease.Attrs) {
			continue
		}
		r := 1 // another node's identity
		switch id := e.lease.Attrs.NodeID; {
		case id == a.req.Attrs.NodeID:
			r = 3
		case id == "":
			r = 2
		case a.m.takenOver(e.key) == takeover{from: id, left: true}:
			continue
		}
		if r > rank {
			best, rank = e, r
		}
	}
	return best, rank > 0
}

// claim takes over the node's existing lease: the same subnet and etcd lease, new attributes.
// A lease that no longer fits the config is deleted so that a new one is made.
func (a *acquisition) claim(ctx context.Context, own entry) (subnet.Lease, bool, []entry, error) {
	m := a.m
	key := own.key
	unchanged := clientv3.Compare(clientv3.ModRevision(key), "=", own.modRev)
	if !a.cfg.Compatible(own.lease.Subnet, own.lease.IPv6Subnet) {
		m.log.Info("deleting own lease made under another network config", "lease", own.lease.Key())
		resp, err := call(ctx, m.large(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
			return m.cli.Txn(ctx).If(unchanged).Then(clientv3.OpDelete(key)).Else(m.listOp()).Commit()
		})
		if err != nil {
			return subnet.Lease{}, false, nil, fmt.Errorf("etcd: delete stale lease %s: %w", key, err)
		}
		return a.relist(ctx, resp)
	}
	attrs, err := a.attrsFor(ctx, own.lease.Subnet, own.lease.IPv6Subnet, own.lease.Attrs)
	if err != nil {
		return subnet.Lease{}, false, nil, err
	}
	if id := own.lease.Attrs.NodeID; id != "" && id != attrs.NodeID {
		m.log.Warn("taking over a lease with this node's public IP that another node identity published (this node's, lost at a reboot? if that node lives, it takes it back and this node gets a lease of its own)",
			"lease", own.lease.Key(), "published_by", id, "node", attrs.NodeID)
		m.noteTakeover(key, takeover{from: id})
	}
	l := *own.lease
	l.Attrs = attrs
	id := own.leaseID
	if id != 0 {
		ka, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
			return m.cli.KeepAliveOnce(ctx, id)
		})
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// Expired since the list: the key is gone with it, look again.
			entries, err := a.list(ctx)
			return subnet.Lease{}, false, entries, err
		}
		if err != nil {
			return subnet.Lease{}, false, nil, fmt.Errorf("etcd: keep lease %s alive: %w", key, err)
		}
		l.Expiration = time.Now().Add(time.Duration(ka.TTL) * time.Second)
	}
	if own.lease.Attrs.Equal(attrs) {
		return l, true, nil, nil
	}
	val, err := attrs.MarshalJSON()
	if err != nil {
		return subnet.Lease{}, false, nil, fmt.Errorf("etcd: encode lease %s: %w", key, err)
	}
	var opts []clientv3.OpOption
	if id != 0 {
		opts = append(opts, clientv3.WithLease(id))
	}
	resp, err := call(ctx, m.large(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return m.cli.Txn(ctx).If(unchanged).Then(clientv3.OpPut(key, string(val), opts...)).Else(m.listOp()).Commit()
	})
	if err != nil {
		return subnet.Lease{}, false, nil, fmt.Errorf("etcd: update lease %s: %w", key, err)
	}
	if !resp.Succeeded {
		return a.relist(ctx, resp)
	}
	return l, true, nil, nil
}

// relist reads the listing that the Else branch of a failed transaction returned.
func (a *acquisition) relist(ctx context.Context, resp *clientv3.TxnResponse) (subnet.Lease, bool, []entry, error) {
	if resp.Succeeded || len(resp.Responses) == 0 {
		entries, err := a.list(ctx)
		return subnet.Lease{}, false, entries, err
	}
	a.rev = resp.Header.Revision
	return subnet.Lease{}, false, a.m.parseAll(resp.Responses[0].GetResponseRange().Kvs), nil
}

// list lists the leases to pick from, noting their revision.
func (a *acquisition) list(ctx context.Context) ([]entry, error) {
	entries, rev, err := a.m.list(ctx)
	a.rev = rev
	return entries, err
}

// create picks a free subnet and creates its key, if nobody did meanwhile.
func (a *acquisition) create(ctx context.Context, entries []entry) (subnet.Lease, bool, []entry, error) {
	m := a.m
	// Only the families the config enables: at 65,000 leases each list is 2 MiB.
	var taken4, taken6 []netip.Prefix
	if a.cfg.EnableIPv4 {
		taken4 = make([]netip.Prefix, 0, len(entries))
	}
	if a.cfg.EnableIPv6 {
		taken6 = make([]netip.Prefix, 0, len(entries))
	}
	for _, e := range entries {
		if !e.named {
			continue
		}
		// A key with a bad value still occupies its subnet: its key cannot be created.
		if a.cfg.EnableIPv4 {
			taken4 = append(taken4, e.lease.Subnet)
		}
		if a.cfg.EnableIPv6 {
			taken6 = append(taken6, e.lease.IPv6Subnet)
		}
	}
	l := subnet.Lease{Attrs: a.req.Attrs}
	var err error
	if a.cfg.EnableIPv4 {
		if l.Subnet, err = subnet.Allocate(a.cfg.IPv4Range(), taken4, a.req.Previous, rand.Uint64N); err != nil {
			return subnet.Lease{}, false, nil, fmt.Errorf("etcd: acquire IPv4 subnet in %s: %w", a.cfg.Network, err)
		}
	}
	if a.cfg.EnableIPv6 {
		if l.IPv6Subnet, err = subnet.Allocate(a.cfg.IPv6Range(), taken6, a.req.PreviousIPv6, rand.Uint64N); err != nil {
			return subnet.Lease{}, false, nil, fmt.Errorf("etcd: acquire IPv6 subnet in %s: %w", a.cfg.IPv6Network, err)
		}
	}
	if a.grant == 0 {
		g, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.LeaseGrantResponse, error) {
			return m.cli.Grant(ctx, int64(m.ttl/time.Second))
		})
		if err != nil {
			return subnet.Lease{}, false, nil, fmt.Errorf("etcd: grant a %s lease: %w", m.ttl, err)
		}
		a.grant = g.ID
	}
	if l.Attrs, err = a.attrsFor(ctx, l.Subnet, l.IPv6Subnet, subnet.LeaseAttrs{}); err != nil {
		return subnet.Lease{}, false, nil, err
	}
	val, err := l.Attrs.MarshalJSON()
	if err != nil {
		return subnet.Lease{}, false, nil, fmt.Errorf("etcd: encode lease: %w", err)
	}
	key := m.subnetsDir() + l.Key()
	resp, err := call(ctx, m.large(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
		return m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			// The keys alone: their subnets and ages are what the check below needs, and at
			// 20,000 leases the values would be megabytes to send and parse. Only those
			// created since the leases picked from: no older one overlaps the subnet picked,
			// and at 65,000 leases all the keys were 14 MiB at the start-up's peak.
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(a.grant)),
				clientv3.OpGet(m.subnetsDir(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithMinCreateRev(a.rev+1))).
			Else(m.listOp()).
			Commit()
	})
	if err != nil {
		return subnet.Lease{}, false, nil, fmt.Errorf("etcd: create lease %s: %w", key, err)
	}
	if !resp.Succeeded {
		return a.relist(ctx, resp)
	}
	// Keys of other lengths or, for dual stack, the other family can overlap ours without
	// being the same key. The older key wins: whoever created later sees it here and yields.
	created := resp.Header.Revision
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		sn, sn6, err := subnet.ParseKey(strings.TrimPrefix(string(kv.Key), m.subnetsDir()))
		if err == nil && string(kv.Key) != key && kv.CreateRevision < created && overlaps(subnet.Lease{Subnet: sn, IPv6Subnet: sn6}, l) {
			m.log.Info("new lease overlaps an older one, trying another", "lease", l.Key(), "older", string(kv.Key))
			_, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.TxnResponse, error) {
				return m.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", created)).Then(clientv3.OpDelete(key)).Commit()
			})
			if err != nil {
				return subnet.Lease{}, false, nil, fmt.Errorf("etcd: delete overlapping lease %s: %w", key, err)
			}
			entries, err := a.list(ctx)
			return subnet.Lease{}, false, entries, err
		}
	}
	a.grant = 0 // bound to the key now: no longer ours to revoke on failure
	l.Expiration = time.Now().Add(m.ttl)
	l.Created = created
	m.log.Info("acquired lease", "lease", l.String())
	return l, true, nil, nil
}

func overlaps(a, b subnet.Lease) bool {
	return a.Subnet.IsValid() && b.Subnet.IsValid() && a.Subnet.Overlaps(b.Subnet) ||
		a.IPv6Subnet.IsValid() && b.IPv6Subnet.IsValid() && a.IPv6Subnet.Overlaps(b.IPv6Subnet)
}

// Renew implements subnet.Manager: it keeps the node's etcd lease alive (no new grant) and,
// when the lease is gone, acquires one again, on the same subnet if it is still free.
func (m *Manager) Renew(ctx context.Context, own subnet.Lease) (l subnet.Lease, err error) {
	defer func() {
		if err == nil {
			m.noteOwn(l)
		}
	}()
	key := m.subnetsDir() + own.Key()
	resp, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.GetResponse, error) { return m.cli.Get(ctx, key) })
	if err != nil {
		return subnet.Lease{}, fmt.Errorf("etcd: renew %s: %w", key, err)
	}
	if len(resp.Kvs) == 1 {
		e, _ := m.parse(resp.Kvs[0])
		if id := e.lease.Attrs.NodeID; e.valErr == nil && id != "" && id != own.Attrs.NodeID && m.takenOver(key) == (takeover{from: id}) {
			// The node this one took the lease over from put its value back: it lives, and
			// this node is a clone of it (same public IP). It gets a lease of its own.
			m.noteTakeover(key, takeover{from: id, left: true})
			return m.reacquire(ctx, own, "the node whose lease this node took over took it back: this node is a clone of it, with the same public IP")
		}
		if e.valErr == nil && e.lease.Attrs.PublicIP == own.Attrs.PublicIP && e.lease.Attrs.PublicIPv6 == own.Attrs.PublicIPv6 {
			own.Created = e.lease.Created
			if id := e.leaseID; id == 0 {
				own.Expiration = time.Time{} // a reservation never expires
				return own, nil
			} else if ka, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
				return m.cli.KeepAliveOnce(ctx, id)
			}); err == nil {
				own.Expiration = time.Now().Add(time.Duration(ka.TTL) * time.Second)
				if !e.lease.Attrs.Equal(own.Attrs) {
					// Someone edited our value: Acquire puts ours back on the same key.
					return m.reacquire(ctx, own, "lease value changed in etcd")
				}
				return own, nil
			} else if !errors.Is(err, rpctypes.ErrLeaseNotFound) {
				return subnet.Lease{}, fmt.Errorf("etcd: renew %s: keep lease alive: %w", key, err)
			}
		}
	}
	return m.reacquire(ctx, own, "lease lost")
}

func (m *Manager) reacquire(ctx context.Context, own subnet.Lease, why string) (subnet.Lease, error) {
	m.log.Warn("re-acquiring own lease", "lease", own.Key(), "reason", why)
	l, err := m.Acquire(ctx, subnet.AcquireRequest{Attrs: own.Attrs, Previous: own.Subnet, PreviousIPv6: own.IPv6Subnet})
	if err != nil {
		return subnet.Lease{}, fmt.Errorf("etcd: re-acquire after %s: %w", why, err)
	}
	if !l.SameSubnets(own) {
		m.log.Warn("own subnet changed", "old", own.Key(), "new", l.Key())
	}
	return l, nil
}

// Release implements subnet.Manager: it revokes the node's etcd lease, which deletes the key.
// A reservation (a key without an etcd lease) belongs to the administrator and stays.
func (m *Manager) Release(ctx context.Context, own subnet.Lease) error {
	key := m.subnetsDir() + own.Key()
	resp, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.GetResponse, error) { return m.cli.Get(ctx, key) })
	if err != nil {
		return fmt.Errorf("etcd: release %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	e, _ := m.parse(resp.Kvs[0])
	if e.valErr != nil || e.lease.Attrs.PublicIP != own.Attrs.PublicIP || e.lease.Attrs.PublicIPv6 != own.Attrs.PublicIPv6 {
		return nil // not ours any more
	}
	if id := e.leaseID; id != 0 {
		_, err := call(ctx, m.small(), func(ctx context.Context) (*clientv3.LeaseRevokeResponse, error) { return m.cli.Revoke(ctx, id) })
		if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("etcd: release %s: revoke: %w", key, err)
		}
	}
	return nil
}
