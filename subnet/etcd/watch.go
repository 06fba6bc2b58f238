package etcd

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/subnet"
)

// Watch implements subnet.Manager. It lists the leases, then watches from the revision after
// the listing. A broken watch resumes from the last revision it saw; when etcd has compacted
// that history away, it lists again and sends the difference, so no change is ever missed.
func (m *Manager) Watch(ctx context.Context, out chan<- []subnet.Event) error {
	w := &watcher{m: m, out: out, known: map[string]subnet.Lease{}, skipped: map[string]int64{}}
	return w.run(ctx)
}

// watcher holds the leases sent so far, from which every later batch is a difference.
type watcher struct {
	m       *Manager
	out     chan<- []subnet.Event
	known   map[string]subnet.Lease // by etcd key: what the receiver has been told
	skipped map[string]int64        // by etcd key: mod revision of a bad value already reported
	rev     int64                   // last revision the receiver is up to date with
	sent    bool                    // the first batch went out
}

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 10 * time.Second
)

func (w *watcher) run(ctx context.Context) error {
	backoff := minBackoff
	for {
		err := w.sync(ctx)
		if err == nil {
			err = w.follow(ctx)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil {
			backoff = minBackoff
			continue
		}
		w.m.log.Warn("lease watch interrupted, resuming", "revision", w.rev, "retry_in", backoff, "err", err)
		if w.m.opts.OnWatchRestart != nil {
			w.m.opts.OnWatchRestart(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// sync lists the leases when the receiver has not been told of them (the first time, or after
// a compaction) and sends the difference with what it knows.
func (w *watcher) sync(ctx context.Context) error {
	if w.rev != 0 {
		return nil
	}
	resp, err := w.m.cli.Get(ctx, w.m.subnetsDir(), clientv3.WithPrefix())
	if err != nil {
		return fmt.Errorf("list leases: %w", err)
	}
	if err := w.send(ctx, w.relisted(resp.Kvs)); err != nil {
		return err
	}
	w.rev = resp.Header.Revision
	return nil
}

// follow watches from the revision after the last one seen until the watch breaks.
func (w *watcher) follow(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	ch := w.m.cli.Watch(wctx, w.m.subnetsDir(), clientv3.WithPrefix(), clientv3.WithRev(w.rev+1), clientv3.WithProgressNotify())
	for resp := range ch {
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
		if len(resp.Events) > 0 {
			if err := w.send(ctx, w.changed(resp.Events)); err != nil {
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

// relisted takes a full listing of the leases and returns the events that bring the
// receiver from what it knows to it.
func (w *watcher) relisted(kvs []*mvccpb.KeyValue) []subnet.Event {
	next := make(map[string]subnet.Lease, len(kvs))
	for _, kv := range kvs {
		if l, ok := w.valid(kv); ok {
			next[string(kv.Key)] = l
		} else if old, had := w.known[string(kv.Key)]; had {
			next[string(kv.Key)] = old // a bad new value does not undo the last good one
		}
	}
	keys := make(map[string]bool, len(next)+len(w.known))
	for k := range next {
		keys[k] = true
	}
	for k := range w.known {
		keys[k] = true
	}
	return w.apply(keys, next)
}

// changed takes the events of one watch response and returns the events for the receiver.
func (w *watcher) changed(events []*clientv3.Event) []subnet.Event {
	// next starts as what the receiver knows of the touched keys and takes the events in
	// order; a bad value keeps whatever was there before it.
	next := make(map[string]subnet.Lease)
	keys := make(map[string]bool)
	for _, ev := range events {
		k := string(ev.Kv.Key)
		if !keys[k] {
			keys[k] = true
			if old, had := w.known[k]; had {
				next[k] = old
			}
		}
		switch ev.Type {
		case mvccpb.DELETE:
			delete(next, k)
		case mvccpb.PUT:
			if l, ok := w.valid(ev.Kv); ok {
				next[k] = l
			}
		}
	}
	return w.apply(keys, next)
}

// valid parses a key-value; a bad one is logged and reported once per version.
func (w *watcher) valid(kv *mvccpb.KeyValue) (subnet.Lease, bool) {
	e, _ := w.m.parse(kv)
	if e.valErr == nil {
		delete(w.skipped, string(kv.Key))
		return e.lease, true
	}
	k := string(kv.Key)
	if w.skipped[k] != kv.ModRevision {
		w.skipped[k] = kv.ModRevision
		w.m.log.Warn("skipping malformed lease", "key", strings.TrimPrefix(k, w.m.subnetsDir()), "err", e.valErr)
		if w.m.opts.OnSkip != nil {
			w.m.opts.OnSkip(k, e.valErr)
		}
	}
	return subnet.Lease{}, false
}

// apply makes known hold next for the given keys and returns the events that say so.
func (w *watcher) apply(keys map[string]bool, next map[string]subnet.Lease) []subnet.Event {
	var evs []subnet.Event
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		old, had := w.known[k]
		l, has := next[k]
		switch {
		case has && (!had || !old.Attrs.Equal(l.Attrs)):
			w.known[k] = l
			evs = append(evs, subnet.Event{Type: subnet.EventAdded, Lease: l})
		case !has && had:
			delete(w.known, k)
			delete(w.skipped, k)
			evs = append(evs, subnet.Event{Type: subnet.EventRemoved, Lease: old})
		}
	}
	return evs
}

// send delivers a batch; empty batches are dropped except the first, which tells the
// receiver that it now knows every lease.
func (w *watcher) send(ctx context.Context, evs []subnet.Event) error {
	if len(evs) == 0 && w.sent {
		return nil
	}
	select {
	case w.out <- evs:
		w.sent = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
