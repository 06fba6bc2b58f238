package kube

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/internal/hashindex"
	"github.com/weftnet/weft/subnet"
)

// busyPoll is how often a batch that waits for the receiver looks whether it took the
// previous one.
const busyPoll = time.Millisecond

// Watch implements subnet.Manager with one client-go reflector on nodes. It fills the watch's
// cache, which keeps a small record of each Node (peerNode) and notes the nodes whose record
// changed; this goroutine turns the noted nodes into one batch of lease events whenever the
// receiver is ready for one. While the first list streams, those are partial batches of the
// Nodes streamed so far (nodeStore.Transformer); the first whole batch, sent once the list is
// in, completes it. A broken connection is the reflector's business: it resumes (relisting
// when it must) and only differences reach the receiver.
//
// Each call runs its own reflector; the daemon calls Watch once.
func (m *Manager) Watch(ctx context.Context, out chan<- subnet.Batch) error {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return err
	}
	w := m.newWatcher(cfg, out)
	return w.run(ctx)
}

// watcher is one Watch: the reflector, its cache, and what the receiver has been told.
type watcher struct {
	m     *Manager
	cfg   *subnet.Config
	out   subnet.Sender
	refl  *cache.Reflector
	store *nodeStore

	synced atomic.Bool // the first whole batch is sent

	// Owned by run's goroutine.
	seed    maphash.Seed                      // of the attribute digests in known
	known   hashindex.Index[string, *tracked] // by node name: the last good lease of each node
	skipped map[string]string                 // by node name: the problem already reported
	// Two Nodes may carry the same podCIDRs (a stale Node object, a hostile or mistaken
	// write), while the receiver keys leases by their subnets: of the nodes that claim one
	// key, only the holder's lease is sent (see holder), so that a newcomer cannot displace
	// the node there first, nor its deletion remove that node's lease. claims holds every
	// claimant of a key.
	claims hashindex.Index[subnets, *tracked]
}

// tracked is a node whose good lease the watcher read: the cache's record it read it from
// (which names the node), and what the watcher keeps of the lease. One allocation of 48
// bytes a node, held by its name (known) and by its subnets (claims) in two indexes of 9-byte
// slots: 84 bytes a node at 65,000, where two Go maps, of the told by name and of the first
// claimant's name by subnets, took about 200 (their slots hold key and value, and at 65,000
// they were half full: 128 tables of 1,024). The record is the one the cache holds once the
// watcher has read the node's latest; until then, and while the node's latest cannot be read
// (kept), it is the one the watcher last read (a name string of its own made tracked 64 bytes).
type tracked struct {
	rec *peerNode
	told
}

// name is the node's name.
func (t *tracked) name() string { return t.rec.GetName() }

// hashSubnets hashes subnets as their bytes (maphash.Comparable would move them to the heap).
func hashSubnets(seed maphash.Seed, s subnets) uint64 {
	var b [4 + 16 + 2]byte
	copy(b[:4], s.v4[:])
	copy(b[4:20], s.v6[:])
	b[20], b[21] = s.bits4, s.bits6
	return maphash.Bytes(seed, b[:])
}

// told is what the watcher keeps of a node's good lease: its subnets, to name it in a
// removal, a digest of its attributes (subnet.LeaseAttrs.Digest), to tell a change, its age,
// and whether the receiver holds it. The receiver holds the lease itself; the cache, the
// node's record (tracked: what it all takes). A told of two netip.Prefix and its node's
// name, kept by node and again by a lease key string, and the claimants by that string took
// 476 bytes a node (BenchmarkKubeWatchListing).
type told struct {
	sn      subnets
	held    bool // the receiver holds this lease for sn, of all the claimants
	attrs   uint64
	created int64
}

// same reports whether t and o are one lease, held or not.
func (t told) same(o told) bool {
	t.held, o.held = false, false
	return t == o
}

// subnets are a lease's subnets, what the receiver keys leases by (subnet.Lease.Key), in
// 22 bytes and no allocation.
type subnets struct {
	v4           [4]byte
	v6           [16]byte
	bits4, bits6 uint8 // the prefix length plus one; 0: no subnet of the family
}

// subnetsOf are the subnets of a lease: sn is IPv4 (podCIDRs puts an IPv4-mapped IPv6
// prefix in sn6), sn6 IPv6; either may be the zero Prefix.
func subnetsOf(sn, sn6 netip.Prefix) subnets {
	var s subnets
	if sn.IsValid() {
		s.v4, s.bits4 = sn.Addr().As4(), uint8(sn.Bits()+1)
	}
	if sn6.IsValid() {
		s.v6, s.bits6 = sn6.Addr().As16(), uint8(sn6.Bits()+1)
	}
	return s
}

// lease is the lease that names s and nothing more, as a removal names it.
func (s subnets) lease() subnet.Lease {
	var l subnet.Lease
	if s.bits4 > 0 {
		l.Subnet = netip.PrefixFrom(netip.AddrFrom4(s.v4), int(s.bits4)-1)
	}
	if s.bits6 > 0 {
		l.IPv6Subnet = netip.PrefixFrom(netip.AddrFrom16(s.v6), int(s.bits6)-1)
	}
	return l
}

// String is the lease key of s.
func (s subnets) String() string { return s.lease().Key() }

// compare orders subnets, for batches in an order that does not depend on a map's.
func (s subnets) compare(o subnets) int {
	return cmp.Or(bytes.Compare(s.v4[:], o.v4[:]), cmp.Compare(s.bits4, o.bits4),
		bytes.Compare(s.v6[:], o.v6[:]), cmp.Compare(s.bits6, o.bits6))
}

func (m *Manager) newWatcher(cfg *subnet.Config, out chan<- subnet.Batch) *watcher {
	w := &watcher{
		m: m, cfg: cfg, out: subnet.Sender{Out: out}, store: newNodeStore(m.ann),
		seed: maphash.MakeSeed(), skipped: map[string]string{},
		known:  hashindex.New(hashindex.String, (*tracked).name),
		claims: hashindex.New(hashSubnets, func(t *tracked) subnets { return t.sn }),
	}
	// The reflector's list and watch calls are seen on their way: whether they fail says
	// whether the API server can be reached (Check) and is a watch restart; a list after
	// the first sync is a relist.
	nodes := m.nodes
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return untilReachable(ctx, w, true, func() (runtime.Object, error) { return nodes.List(ctx, opts) })
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			// With SendInitialEvents the watch streams a list first.
			list := opts.SendInitialEvents != nil && *opts.SendInitialEvents
			return untilReachable(ctx, w, list, func() (watch.Interface, error) { return nodes.Watch(ctx, opts) })
		},
	}
	// The reflector streams the first list (WatchList, on by default since client-go 1.35):
	// the initial state comes over the watch as one event per Node, which the cache turns
	// into a record at once (nodeStore's Transformer), where a list comes as one response of
	// every whole Node. With 20,000 Nodes (make bench) a cold start peaks at 77 MiB streamed
	// against 117 to 128 MiB listed, for the same time to all routes (2.3 s); with 1,000, all
	// routes take about 90 ms longer. An API server without streamed lists (before 1.32, or
	// with the WatchList feature off) makes the reflector list instead.
	w.refl = cache.NewReflectorWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, m.nodes), &nodeEvent{}, w.store,
		cache.ReflectorOptions{Name: "weft nodes", TypeDescription: "weft nodes"})
	return w
}

// untilReachable makes the reflector's list or watch call, and makes it again as long as it
// fails because the API server cannot be reached (no answer at the HTTP level: a refused or
// reset connection, a timeout) and then answers Probe again, which is asked every
// probeEvery. client-go's reflector would otherwise wait out its own backoff, which grows
// over an outage to between 30 and 60 s: the Kubernetes-mode soak saw a node follow the other
// nodes again 61 s after the API server had come back. Now it is at most probeEvery after,
// as in etcd mode. Other errors (an API status such as 410 Gone or 403) go to the reflector,
// which knows what each means.
func untilReachable[T any](ctx context.Context, w *watcher, list bool, call func() (T, error)) (T, error) {
	for {
		v, err := call()
		w.called(err, list)
		if err == nil || !unreachable(err) || ctx.Err() != nil {
			return v, err
		}
		if werr := w.m.waitReachable(ctx); werr != nil {
			return v, err
		}
	}
}

// unreachable reports whether err is no answer from the API server rather than one: not an
// API status.
func unreachable(err error) bool {
	var st apierrors.APIStatus
	return !errors.As(err, &st) && !errors.Is(err, context.Canceled)
}

// probeEvery is how often waitReachable asks the API server whether it answers.
const probeEvery = time.Second

// waitReachable returns once the API server answers Probe, asked every probeEvery, or with
// ctx's error when it ends first.
func (m *Manager) waitReachable(ctx context.Context) error {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, probeEvery)
			err := m.Probe(pctx)
			cancel()
			if err == nil {
				return nil
			}
		}
	}
}

// called notes how a list or watch call of the reflector went. A failure is logged here,
// because client-go retries a refused connection without telling the error handler. An API
// server that does not stream lists (before 1.32, or with the WatchList feature off) refuses
// the streamed list as invalid, and the reflector lists instead: no interruption.
func (w *watcher) called(err error, list bool) {
	w.m.reachable(err)
	switch {
	case err != nil && list && apierrors.IsInvalid(err):
		w.m.log.Info("the API server does not stream lists; listing the nodes instead", "err", err)
	case err != nil && w.m.onWatchRestart != nil:
		w.m.onWatchRestart(err)
		fallthrough
	case err != nil:
		w.m.log.Warn("node watch interrupted, resuming", "err", err)
	case list && w.synced.Load() && w.m.onRelist != nil:
		w.m.onRelist()
	}
}

func (w *watcher) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		// client-go logs through the context's logger: weft's, not klog's global one.
		w.reflect(logr.NewContext(ctx, logr.FromSlogHandler(w.m.log.Handler())))
	}()
	defer func() {
		cancel()
		<-done
	}()

	for {
		if err := w.flush(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.store.kick:
		}
		if err := w.settle(ctx); err != nil {
			return err
		}
	}
}

// relistWait is how long the reflector waits before it lists again after a list or watch
// that it could not resume (an API status such as 403, or 410 Gone for a stale resource
// version). A call that gets no answer waits in untilReachable instead.
const relistWait = time.Second

// reflect runs the reflector until ctx ends.
func (w *watcher) reflect(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// The server ends every watch after a few minutes, and the reflector resumes it:
		// what ends ListAndWatch is what it could not resume.
		if err := w.refl.ListAndWatchWithContext(ctx); err != nil && ctx.Err() == nil {
			w.m.log.Debug("node watch ended, listing again", "err", err)
		}
		t.Reset(relistWait)
	}
}

// settle lets a batch gather for as long as the receiver has not taken the previous batch
// from its channel: changes meanwhile join this batch instead of queueing up behind it. A
// lone change waits for nothing.
func (w *watcher) settle(ctx context.Context) error {
	if len(w.out.Out) == 0 {
		return nil
	}
	t := time.NewTicker(busyPoll)
	defer t.Stop()
	for len(w.out.Out) > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// flush sends the events that bring the receiver up to date with the noted nodes: removals
// first, so that a subnet that moved from one node to another is never seen twice (an empty
// batch goes out only as the first whole one: subnet.Sender). Until the first list is in, the
// batch is partial.
func (w *watcher) flush(ctx context.Context) error {
	names, whole := w.store.take()
	if w.known.Len() == 0 {
		// The first batch holds every node (or, while the list streams, every node streamed
		// so far): the indexes are made at that size at once, not grown through every power
		// of two from the smallest (the garbage counts in the start's peak).
		w.known.Reserve(len(names))
		w.claims.Reserve(len(names))
	}

	// The leases read in this batch, as the events that would add them (read.add), and the
	// keys whose claims changed, true for those whose holder's lease changed or went.
	read := &batch{events: make([]subnet.Event, 0, len(names)), at: make(map[string]int32, len(names))}
	keys := make(map[subnets]bool, len(names))
	mark := func(key subnets, holderGone bool) { keys[key] = keys[key] || holderGone }
	for _, name := range slices.Sorted(maps.Keys(names)) {
		old, had := w.known.Get(name)
		l, st, rec := w.current(name)
		if st == kept && name == w.m.node {
			// Peers keep the last good lease of a node whose annotations went bad; its own
			// daemon must hear that they did, as a removal, to write them again: peers that
			// start meanwhile cannot read them.
			st = absent
		}
		switch {
		case st == kept:
		case st == present:
			now := w.told(l)
			if had && now.same(old.told) {
				old.rec = rec // the record read, not one the cache has dropped
				continue
			}
			if had {
				// Out of its key's claimants while its key changes.
				w.claims.Remove(old)
				mark(old.sn, old.held)
				old.rec, old.told = rec, now
			} else {
				old = &tracked{rec: rec, told: now}
				w.known.Put(old)
			}
			w.claims.Add(old)
			mark(now.sn, false)
			read.add(name, l)
		case had:
			w.known.Delete(name)
			w.claims.Remove(old)
			mark(old.sn, old.held)
		}
	}
	var removed []subnet.Event
	for _, key := range slices.SortedFunc(maps.Keys(keys), subnets.compare) {
		h, ok := w.holder(key, read)
		switch {
		case ok && h.held:
			// The receiver has it.
		case ok:
			if prev := w.heldBy(key); prev != nil {
				prev.held = false
			}
			h.held = true
			read.send(h.name())
		case keys[key]:
			// Its holder changed or went, and no claimant can take its place. (A holder
			// that did not change would have kept it.)
			removed = append(removed, subnet.Event{Type: subnet.EventRemoved, Lease: key.lease()})
		}
	}
	added := read.sent()
	if len(removed) > 0 {
		added = append(removed, added...)
	}
	if !whole {
		return w.out.SendPartial(ctx, added)
	}
	w.synced.Store(true)
	return w.out.Send(ctx, added)
}

// batch is the leases a flush reads, as the events that add them, of which it sends those
// of the holders. At 65,000 nodes the first batch holds 17 MiB of events; a map of the
// leases by node name beside them took 33 MiB more (a lease is 240 bytes, and the map's
// slots are made for twice the nodes).
type batch struct {
	events []subnet.Event
	at     map[string]int32 // by node name: the index of its lease in events
	chosen []bool           // by index in events: the lease is to be sent
}

// add notes the lease of the node called name, as read.
func (b *batch) add(name string, l subnet.Lease) {
	b.at[name] = int32(len(b.events))
	b.events = append(b.events, subnet.Event{Type: subnet.EventAdded, Lease: l})
}

// has reports whether the lease of the node called name is read.
func (b *batch) has(name string) bool {
	_, ok := b.at[name]
	return ok
}

// send marks the lease of the node called name, read, to be sent.
func (b *batch) send(name string) {
	if b.chosen == nil {
		b.chosen = make([]bool, len(b.events))
	}
	i := int(b.at[name])
	if i >= len(b.chosen) { // read since the first send
		b.chosen = append(b.chosen, make([]bool, i+1-len(b.chosen))...)
	}
	b.chosen[i] = true
}

// sent are the events of the leases marked to be sent, in the order they were read, in
// the events' own array.
func (b *batch) sent() []subnet.Event {
	j := 0
	for i, chosen := range b.chosen {
		if chosen {
			b.events[j] = b.events[i]
			j++
		}
	}
	clear(b.events[j:]) // what is not sent is not kept
	return b.events[:j]
}

// told is what the watcher keeps of l.
func (w *watcher) told(l subnet.Lease) told {
	return told{sn: subnetsOf(l.Subnet, l.IPv6Subnet), attrs: l.Attrs.Digest(w.seed), created: l.Created}
}

// heldBy is the claimant of key whose lease the receiver holds for it; nil if none is.
func (w *watcher) heldBy(key subnets) *tracked {
	for t := range w.claims.Values(key) {
		if t.held {
			return t
		}
	}
	return nil
}

// holder picks the node whose lease the receiver is to hold for key, of the nodes that claim
// it, and reads its lease into read if it is not there and the receiver does not hold it: this
// manager's own node first (its daemon reads its own lease from the watch), then the oldest
// (the first there, as backend.Set decides between claims), then by name. The holder the
// receiver has keeps its place unless one ranked before it comes; a claimant whose lease
// cannot be read now (a malformed write since) cannot take it. The others are reported as
// skipped, once.
func (w *watcher) holder(key subnets, read *batch) (*tracked, bool) {
	var one [1]*tracked // on the stack where there are no rivals, as nearly everywhere
	ranked := one[:0]
	for t := range w.claims.Values(key) {
		ranked = append(ranked, t)
	}
	slices.SortFunc(ranked, func(a, b *tracked) int {
		switch {
		case a.name() == w.m.node:
			return -1
		case b.name() == w.m.node:
			return 1
		case a.created != b.created:
			return cmp.Compare(a.created, b.created)
		}
		return cmp.Compare(a.name(), b.name())
	})
	for _, c := range ranked {
		if !read.has(c.name()) && !c.held {
			l, st, rec := w.current(c.name())
			if st != present || subnetsOf(l.Subnet, l.IPv6Subnet) != key {
				continue
			}
			c.rec = rec
			// Read since the batch's nodes were taken, the record may be newer than
			// what known has: known takes what the receiver is sent (of the same key,
			// which claims holds it by).
			read.add(c.name(), l)
			c.told = w.told(l)
		}
		w.skipOthers(key, ranked, c.name())
		return c, true
	}
	return nil, false
}

// skipOthers reports, once each, the claimants of key that holder keeps out.
func (w *watcher) skipOthers(key subnets, claimants []*tracked, holder string) {
	for _, c := range claimants {
		n := c.name()
		if n == holder {
			continue
		}
		msg := fmt.Sprintf("its podCIDRs %s are node %s's too, which holds them", key, holder)
		if w.skipped[n] != msg {
			w.skipped[n] = msg
			w.m.log.Warn("skipping node whose podCIDRs another node holds", "node", n, "holder", holder, "podcidrs", key.String())
			if w.m.onSkip != nil {
				w.m.onSkip(n, errors.New(msg))
			}
		}
	}
}

// leaseState is what current found of a node's lease.
type leaseState int

const (
	absent  leaseState = iota // no node, or one that publishes no lease
	present                   // a good lease
	kept                      // a malformed lease: the receiver keeps what it knows
)

// current is the lease the node called name holds now, from the cache, and the cache's
// record of it (nil if none), which the watcher keeps in tracked to name the node. A node
// whose lease cannot be read is reported once per problem and keeps the last good lease the
// receiver knows: a bad write does not make peers forget the node.
func (w *watcher) current(name string) (subnet.Lease, leaseState, *peerNode) {
	p := w.store.get(name)
	if p != nil {
		name = p.GetName() // the skipped map keeps no string of a record the cache dropped
	}
	l, st := w.read(name, p)
	return l, st, p
}

// read is the lease of p, the record of the node called name (nil: none), as current reads it.
func (w *watcher) read(name string, p *peerNode) (subnet.Lease, leaseState) {
	if p == nil {
		delete(w.skipped, name)
		return subnet.Lease{}, absent
	}
	l, peer, err := w.m.recordLease(w.cfg, p)
	if !peer {
		delete(w.skipped, name)
		return subnet.Lease{}, absent
	}
	if err != nil {
		if w.skipped[name] != err.Error() {
			w.skipped[name] = err.Error()
			w.m.log.Warn("skipping node with a malformed lease", "node", name, "err", err)
			if w.m.onSkip != nil {
				w.m.onSkip(name, err)
			}
		}
		return subnet.Lease{}, kept
	}
	delete(w.skipped, name)
	return l, present
}

// peerLease reads the lease a node publishes. peer is false for nodes that publish none:
// without the kube-subnet-manager annotation (nodes not running flannel or weft) or without
// a podCIDR yet.
func (m *Manager) peerLease(cfg *subnet.Config, n *corev1.Node) (l subnet.Lease, peer bool, err error) {
	return m.recordLease(cfg, m.ann.record(n))
}

// recordLease is peerLease of a node's record in the cache.
func (m *Manager) recordLease(cfg *subnet.Config, p *peerNode) (l subnet.Lease, peer bool, err error) {
	ann := p.lookup(m.ann)
	cidrs := p.cidrs()
	if managed, _ := ann(m.ann.managed); managed != "true" || len(cidrs) == 0 {
		return subnet.Lease{}, false, nil
	}
	v4, v6, err := podCIDRs(cidrs)
	if err != nil {
		return subnet.Lease{}, true, err
	}
	// In a dual-stack network a node with a podCIDR of one family only is half a peer: the
	// backend skips the missing half and programs the other.
	dual := cfg.EnableIPv4 && cfg.EnableIPv6
	if cfg.EnableIPv4 {
		if !v4.IsValid() && !dual {
			return subnet.Lease{}, true, errors.New("no IPv4 podCIDR")
		}
		l.Subnet = v4
	}
	if cfg.EnableIPv6 {
		if !v6.IsValid() && !dual {
			return subnet.Lease{}, true, errors.New("no IPv6 podCIDR")
		}
		l.IPv6Subnet = v6
	}
	if l.Attrs, err = m.ann.attrs(cfg, ann); err != nil {
		return subnet.Lease{}, true, err
	}
	l.Created = p.created
	return l, true, nil
}

// nodeAge is the age of a Node's lease (subnet.Lease.Created): its creation time in ns; 0
// when unknown.
func nodeAge(n *corev1.Node) int64 {
	if n.CreationTimestamp.IsZero() {
		return 0
	}
	return n.CreationTimestamp.UnixNano()
}
