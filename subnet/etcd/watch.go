package etcd

import (
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/weftnet/weft/internal/hashindex"
	"github.com/weftnet/weft/subnet"
)

// Watch implements subnet.Manager. It lists the leases, then watches from the revision after
// the listing. A broken watch resumes from the last revision it saw; when etcd has compacted
// that history away, it lists again and sends the difference, so no change is ever missed.
func (m *Manager) Watch(ctx context.Context, out chan<- subnet.Batch) error {
	return newWatcher(m, out).run(ctx)
}

func newWatcher(m *Manager, out chan<- subnet.Batch) *watcher {
	w := &watcher{m: m, out: subnet.Sender{Out: out}, dir: m.subnetsDir(), seed: m.seed,
		known:   hashindex.New(hashindex.String, func(k *knownLease) string { return k.key }),
		skipped: map[string]int64{}, held: map[string]bool{}, minBackoff: minBackoff, maxBackoff: maxBackoff}
	if cfg := m.cfg.Load(); cfg != nil {
		w.ranges = [2]subnet.Range{cfg.IPv4Range(), cfg.IPv6Range()}
	}
	return w
}

// watcher remembers of each lease sent so far only digests, from which every later batch is
// a difference: the receiver holds the leases themselves. Its keys are the etcd keys below
// dir, the lease keys ("10.244.1.0-24").
type watcher struct {
	m    *Manager
	out  subnet.Sender
	dir  string       // the subnets directory, the prefix of every key
	seed maphash.Seed // of the digests
	// known is what the receiver has been told, by key: a record of 32 bytes a lease and 12
	// to 24 of index, where a map of seen by key took 115 (65,000 leases: 7.5 MiB).
	known   hashindex.Index[string, *knownLease]
	skipped map[string]int64 // mod revision of a bad value already reported
	rev     int64            // last revision the receiver is up to date with
	// After etcd went back in time (restored from a backup), removals are held back until
	// holdUntil: the nodes whose leases the backup lacks publish them again meanwhile (each
	// notices within a revision check), and their routes need not go and come back.
	holdUntil time.Time
	held      map[string]bool // known keys absent from etcd, whose removal is held back
	ranges    [2]subnet.Range // the config's IPv4 and IPv6 ranges, whose keys are counted
	leased    [2]uint64       // keys that are subnets of ranges, published in Manager.leased
	failing   bool            // the last attempt failed: Manager.Check says so until one runs

	// minBackoff and maxBackoff bound the wait before a failed watch is tried again.
	minBackoff, maxBackoff time.Duration
}

// knownLease is a lease the receiver has been told of: its key (the one the receiver got)
// and what the watcher keeps of it.
type knownLease struct {
	key string
	seen
}

// seen is what the watcher keeps of a lease the receiver has been told of.
type seen struct {
	value uint64 // digest of the value's bytes: the same bytes again need no parsing
	attrs uint64 // subnet.LeaseAttrs.Digest: a value written otherwise with equal attributes is no change
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
	// probeEvery is how often, while the watch waits to resume after etcd could not serve it,
	// etcd is asked whether it can now: one read that needs the leader.
	probeEvery = time.Second
)

func (w *watcher) run(ctx context.Context) error {
	backoff := w.minBackoff
	for {
		err := w.sync(ctx)
		if err == nil {
			err = w.follow(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			backoff = w.minBackoff
			continue
		}
		w.m.log.Warn("lease watch interrupted, resuming", "revision", w.rev, "retry_in", backoff, "err", err)
		w.failing = true
		w.m.setWatchErr(err)
		if w.m.opts.OnWatchRestart != nil {
			w.m.opts.OnWatchRestart(err)
		}
		if err := w.wait(ctx, backoff, unavailable(err)); err != nil {
			return err
		}
		backoff = min(2*backoff, w.maxBackoff)
	}
}

// wait waits backoff before the watch is tried again. When the watch failed because etcd
// could not serve it (no leader, no member answering), etcd is probed meanwhile and the wait
// ends as soon as it can serve: a cluster that regains its quorum is followed again within a
// probe, not after a backoff grown over the outage.
func (w *watcher) wait(ctx context.Context, backoff time.Duration, probe bool) error {
	done := time.NewTimer(backoff)
	defer done.Stop()
	var tick <-chan time.Time
	if probe {
		t := time.NewTicker(probeEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-done.C:
			return nil
		case <-tick:
			_, err := call(clientv3.WithRequireLeader(ctx), probeEvery, func(ctx context.Context) (*clientv3.GetResponse, error) {
				return w.m.cli.Get(ctx, w.m.configKey(), clientv3.WithCountOnly())
			})
			if err == nil {
				return nil
			}
		}
	}
}

// unavailable reports whether err says that etcd could not serve: no leader, no member
// answering, a request that timed out.
func unavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var coded interface{ Code() codes.Code }
	code := status.Code(err)
	if errors.As(err, &coded) {
		code = coded.Code()
	}
	return code == codes.Unavailable || code == codes.DeadlineExceeded
}

// sync lists the leases when the receiver has not been told of them (the first time, or after
// a compaction) and sends the difference with what it knows.
func (w *watcher) sync(ctx context.Context) error {
	if w.rev != 0 {
		return nil
	}
	ls := w.m.takeListing() // at start-up, the Acquire's: the watch goes on from its revision
	if ls == nil {
		var err error
		if ls, err = w.m.listPages(ctx, false); err != nil {
			return fmt.Errorf("list leases: %w", err)
		}
	}
	if err := w.out.Send(ctx, w.relisted(ls.entries, ls.slots)); err != nil {
		return err
	}
	w.leased = [2]uint64{}
	for _, e := range ls.entries {
		// Not the own lease Acquire created after the listing (no revision yet): the
		// watch brings its creation.
		if e.modRev != 0 {
			w.count(w.key(e.key), 1)
		}
	}
	w.publishPool()
	w.rev = ls.rev
	return nil
}

// count adds d to the leased subnets for a lease key (the etcd key without the subnets'
// directory) that is one of the ranges' subnets.
func (w *watcher) count(key string, d int) {
	if w.ranges[0].Size() == 0 && w.ranges[1].Size() == 0 {
		return
	}
	sn, sn6, err := subnet.ParseKey(key)
	if err != nil {
		return
	}
	for i, p := range [2]netip.Prefix{sn, sn6} {
		if w.ranges[i].Contains(p) {
			w.leased[i] += uint64(d)
		}
	}
}

// countEvents follows the keys created and deleted by a watch response (a put over an
// existing key changes nothing; etcd reports deletions only of keys that exist).
func (w *watcher) countEvents(events []*clientv3.Event) {
	for _, ev := range events {
		switch {
		case ev.Type == mvccpb.DELETE:
			w.count(w.keyOf(ev.Kv.Key), -1)
		case ev.IsCreate():
			w.count(w.keyOf(ev.Kv.Key), 1)
		}
	}
	w.publishPool()
}

func (w *watcher) publishPool() {
	for i, n := range w.leased {
		w.m.leased[i].Store(n)
	}
	w.m.counted.Store(true)
}

// follow watches from the revision after the last one seen until the watch breaks, or until
// etcd's revision is found behind it (restored from a backup: see Options.RevisionCheck), when
// the leases are listed again. The watch requires a leader, so that a member without one
// (cut off from the others, or left without a quorum) fails it rather than holding it open
// with no changes to send; its creation is notified, so that a failed watch is known to run
// again.
func (w *watcher) follow(ctx context.Context) error {
	// etcd's client makes a watch stream for a context's values before it looks whether the
	// context is done, and a stream that never got its watch stays until the client closes:
	// a watch started as the daemon stops would outlive it.
	if err := ctx.Err(); err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := w.m.cli.Watch(wctx, w.m.subnetsDir(), clientv3.WithPrefix(), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify(),
		clientv3.WithCreatedNotify())
	check := time.NewTicker(w.checkEvery())
	defer check.Stop()
	var release <-chan time.Time // when held-back removals are due
	if len(w.held) > 0 {
		t := time.NewTimer(time.Until(w.holdUntil))
		defer t.Stop()
		release = t.C
	}
	for {
		var resp clientv3.WatchResponse
		var open bool
		select {
		case resp, open = <-ch:
		case <-check.C:
			if w.wentBack(wctx) {
				return nil
			}
			continue
		case <-release:
			release = nil
			if err := w.out.Send(ctx, w.released()); err != nil {
				return err
			}
			continue
		}
		if !open {
			break
		}
		if err := resp.Err(); err != nil {
			if errors.Is(err, rpctypes.ErrCompacted) || resp.CompactRevision != 0 {
				w.m.log.Info("lease history compacted past the watch, listing again", "revision", w.rev, "compacted", resp.CompactRevision)
				w.rev = 0
				if w.m.opts.OnRelist != nil {
					w.m.opts.OnRelist()
				}
				return nil
			}
			return fmt.Errorf("watch from revision %d: %w", w.rev+1, err)
		}
		if resp.Created {
			// Its revision is etcd's now, not one that the events before it were sent up
			// to: w.rev stays.
			if w.failing {
				w.failing = false
				w.m.setWatchErr(nil)
			}
			continue
		}
		if len(resp.Events) > 0 {
			w.countEvents(resp.Events)
			if err := w.out.Send(ctx, w.changed(resp.Events)); err != nil {
				return err
			}
		}
		if resp.Header.Revision > w.rev {
			w.rev = resp.Header.Revision
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("watch channel closed")
}

// checkEvery is how often etcd's revision is read (Options.RevisionCheck).
func (w *watcher) checkEvery() time.Duration {
	if every := w.m.opts.RevisionCheck; every > 0 {
		return every
	}
	return 30 * time.Second
}

// released returns the removals held back that are still due: of the keys still absent.
func (w *watcher) released() []subnet.Event {
	var evs []subnet.Event
	for _, k := range slices.Sorted(maps.Keys(w.held)) {
		if _, ok := w.known.Get(k); ok {
			evs = append(evs, w.forget(k))
		}
	}
	clear(w.held)
	if len(evs) > 0 {
		w.m.log.Info("leases missing since etcd went back in time were not published again: removed", "leases", len(evs))
	}
	return evs
}

// wentBack reads etcd's revision and, if it is behind the last one the watch saw (etcd was
// restored from a backup), arranges for the leases to be listed again and reports true. A
// failed read is left to the watch to notice.
func (w *watcher) wentBack(ctx context.Context) bool {
	r, err := call(ctx, w.m.small(), func(ctx context.Context) (*clientv3.GetResponse, error) {
		return w.m.cli.Get(ctx, w.m.configKey(), clientv3.WithCountOnly())
	})
	if err != nil || r.Header.Revision >= w.rev {
		return false
	}
	w.m.log.Warn("etcd's revision went back (restored from a backup?): listing the leases again; leases it lacks are kept for one more check, for their nodes to publish them again",
		"seen", w.rev, "now", r.Header.Revision)
	w.rev = 0
	w.holdUntil = time.Now().Add(w.checkEvery())
	if w.m.opts.OnRelist != nil {
		w.m.opts.OnRelist()
	}
	return true
}

// relisted takes a full listing of the leases and returns the events that bring the
// receiver from what it knows to it: removals first, then the leases that are new or changed,
// in the listing's order. A bad value does not undo the last good one. Entries not parsed
// yet are parsed when their values are not the known ones. With slots (listing.slots), the
// first listing's events are made in them, in place: the entries' leases are then no longer
// theirs.
func (w *watcher) relisted(kvs []entry, slots []subnet.Event) []subnet.Event {
	clear(w.held)                      // what is still absent is held again, if removals are held back
	before, listed := w.known.Len(), 0 // listed: how many of the known keys the listing holds
	var added []subnet.Event
	switch {
	case before == 0 && slots != nil:
		// Entry i's lease is in slot i or apart, and the i-th event made goes to a slot
		// at most i: no slot is written before its lease is read.
		added = slots[:0]
	case before == 0:
		added = make([]subnet.Event, 0, len(kvs)) // the first listing: every lease is new
	}
	for _, e := range kvs {
		k := w.key(e.key)
		old, had := w.seen(k)
		if had {
			listed++
		}
		if had && e.digest == old.value {
			w.good(k)
			continue
		}
		// A copy of its own: a part of the etcd key would keep all of it in w.known.
		ks := strings.Clone(k)
		if l, ok := w.valid(e, ks); ok && w.learn(ks, *l, e.digest, old, had) {
			added = append(added, subnet.Event{Type: subnet.EventAdded, Lease: *l, Key: ks})
		}
	}
	if before == 0 && len(added) < len(slots) {
		clear(slots[len(added):]) // what is left of the leases of entries skipped
	}
	var removed []subnet.Event
	if listed < before {
		present := make(map[string]bool, len(kvs))
		for _, e := range kvs {
			present[w.key(e.key)] = true
		}
		hold := time.Now().Before(w.holdUntil)
		for _, k := range w.knownKeys() {
			switch {
			case present[k]:
			case hold && !w.m.isOwn(k):
				w.held[k] = true
			default:
				removed = append(removed, w.forget(k))
			}
		}
	}
	if len(removed) == 0 {
		return added // not appended to nothing: that copies every event, in place or not
	}
	return append(removed, added...)
}

// changed takes the events of one watch response and returns the events for the receiver,
// one per key touched, in key order.
func (w *watcher) changed(events []*clientv3.Event) []subnet.Event {
	// last is where each touched key ends up: events are taken in order, and a bad value
	// leaves whatever was there before it.
	type end struct {
		lease   subnet.Lease // when fresh, the last good value of the response
		value   uint64       // when fresh, the digest of its bytes
		present bool         // the key holds a lease
		fresh   bool         // a good value other than the known one came; else known's stands
	}
	last := make(map[string]end, len(events))
	for _, ev := range events {
		k := w.keyOf(ev.Kv.Key)
		e, seen := last[k]
		old, had := w.seen(k)
		if !seen {
			e.present = had
		}
		switch ev.Type {
		case mvccpb.DELETE:
			e = end{}
		case mvccpb.PUT:
			en := w.m.unparsed(ev.Kv)
			if had && en.digest == old.value {
				w.good(k)
				e = end{present: true}
			} else if l, ok := w.valid(en, k); ok {
				e = end{lease: *l, value: en.digest, present: true, fresh: true}
			}
		}
		last[k] = e
	}
	var evs []subnet.Event
	for _, k := range slices.Sorted(maps.Keys(last)) {
		e := last[k]
		if e.present && len(w.held) > 0 {
			delete(w.held, k)
		}
		old, had := w.seen(k)
		switch {
		case e.fresh:
			if w.learn(k, e.lease, e.value, old, had) {
				evs = append(evs, subnet.Event{Type: subnet.EventAdded, Lease: e.lease, Key: k})
			}
		case !e.present && had:
			evs = append(evs, w.forget(k))
		}
	}
	return evs
}

// learn notes a good value l of key k, whose bytes digest to value, where the receiver knows
// old (if had); it reports whether the receiver must be told: a value written again, or
// written otherwise with the same attributes, is no change.
func (w *watcher) learn(k string, l subnet.Lease, value uint64, old seen, had bool) bool {
	s := seen{value: value, attrs: l.Attrs.Digest(w.seed)}
	if had && s == old {
		return false
	}
	if kl, ok := w.known.Get(k); ok {
		kl.seen = s
	} else {
		w.known.Put(&knownLease{key: k, seen: s})
	}
	return !had || s.attrs != old.attrs
}

// seen is what the watcher keeps of the lease of key k, and whether the receiver knows it.
func (w *watcher) seen(k string) (seen, bool) {
	if kl, ok := w.known.Get(k); ok {
		return kl.seen, true
	}
	return seen{}, false
}

// knownKeys are the keys of the leases the receiver knows, sorted.
func (w *watcher) knownKeys() []string {
	keys := make([]string, 0, w.known.Len())
	for kl := range w.known.All() {
		keys = append(keys, kl.key)
	}
	slices.Sort(keys)
	return keys
}

// good notes that key k holds a good value: a bad one later is reported again.
func (w *watcher) good(k string) {
	if len(w.skipped) > 0 {
		delete(w.skipped, k)
	}
}

// forget drops a known key and returns its removal: a lease with only its subnets, which the
// key names (it was parsed when the lease was added).
func (w *watcher) forget(k string) subnet.Event {
	w.known.Delete(k)
	delete(w.skipped, k)
	delete(w.held, k)
	sn, sn6, _ := subnet.ParseKey(k)
	return subnet.Event{Type: subnet.EventRemoved, Lease: subnet.Lease{Subnet: sn, IPv6Subnet: sn6}, Key: k}
}

// key is the part of an etcd key below the subnets directory.
func (w *watcher) key(etcdKey string) string { return strings.TrimPrefix(etcdKey, w.dir) }

// keyOf is key of an etcd key's bytes, a string of its own.
func (w *watcher) keyOf(etcdKey []byte) string {
	if len(etcdKey) >= len(w.dir) && string(etcdKey[:len(w.dir)]) == w.dir {
		etcdKey = etcdKey[len(w.dir):]
	}
	return string(etcdKey)
}

// valid parses an entry, unless it was, whose key below the subnets directory is k; a bad
// one is logged and reported once per version.
func (w *watcher) valid(e entry, k string) (*subnet.Lease, bool) {
	w.m.parseValue(&e)
	if e.valErr == nil {
		if len(w.skipped) > 0 {
			delete(w.skipped, k)
		}
		return e.lease, true
	}
	if w.skipped[k] != e.modRev {
		w.skipped[k] = e.modRev
		w.m.log.Warn("skipping malformed lease", "key", k, "err", e.valErr)
		if w.m.opts.OnSkip != nil {
			w.m.opts.OnSkip(e.key, e.valErr)
		}
	}
	return nil, false
}
