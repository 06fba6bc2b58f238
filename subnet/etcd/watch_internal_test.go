package etcd

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet"
)

// TestWatcherDifferences drives the watcher's handling of listings and watch responses
// directly: what it keeps are digests, and these are the cases where digests must give the
// same events full leases gave.
func TestWatcherDifferences(t *testing.T) {
	var logged strings.Builder
	m := New(nil, Options{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	w := newWatcher(m, nil)
	rev := int64(100)
	kv := func(i int, value string) *mvccpb.KeyValue {
		rev++
		return &mvccpb.KeyValue{Key: benchKV(m, i, 0).Key, Value: []byte(value), ModRevision: rev}
	}
	put := func(i, gen int) *clientv3.Event {
		v := benchKV(m, i, gen)
		rev++
		v.ModRevision = rev
		return &clientv3.Event{Type: mvccpb.PUT, Kv: v}
	}
	del := func(i int) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.DELETE, Kv: &mvccpb.KeyValue{Key: benchKV(m, i, 0).Key}}
	}
	bad := func(i int) *clientv3.Event {
		return &clientv3.Event{Type: mvccpb.PUT, Kv: kv(i, `{"PublicIP":"nope"}`)}
	}
	show := func(evs []subnet.Event) string {
		var out []string
		for _, ev := range evs {
			s := ev.Type.String() + " " + ev.Lease.Key()
			if ev.Key != ev.Lease.Key() {
				s += " keyed " + ev.Key // the receivers keep the watcher's key: it must be the lease's
			}
			if ev.Type == subnet.EventAdded {
				s += " " + string(ev.Lease.Attrs.BackendData[len(ev.Lease.Attrs.BackendData)-4:len(ev.Lease.Attrs.BackendData)-2])
			} else if ev.Lease.Attrs.BackendType != "" || ev.Lease.Attrs.PublicIP.IsValid() {
				s += " with attributes"
			}
			out = append(out, s)
		}
		return strings.Join(out, ", ")
	}
	check := func(what string, evs []subnet.Event, want string) {
		t.Helper()
		if got := show(evs); got != want {
			t.Errorf("%s: events %q, want %q", what, got, want)
		}
	}

	check("first listing", w.relisted(entriesOf(m, []*mvccpb.KeyValue{benchKV(m, 1, 0), benchKV(m, 2, 0), benchKV(m, 3, 0)}), nil),
		"added 10.0.1.0-24 00, added 10.0.2.0-24 00, added 10.0.3.0-24 00")
	check("the same value again", w.changed([]*clientv3.Event{put(1, 0)}), "")
	same := benchKV(m, 1, 0)
	same.Value = []byte(strings.ReplaceAll(string(same.Value), ",", ", "))
	check("an equal value written otherwise", w.changed([]*clientv3.Event{{Type: mvccpb.PUT, Kv: same}}), "")
	check("a change", w.changed([]*clientv3.Event{put(1, 7)}), "added 10.0.1.0-24 07")
	check("a bad value", w.changed([]*clientv3.Event{bad(1)}), "")
	check("the last good value again", w.changed([]*clientv3.Event{put(1, 7)}), "")
	check("a good then a bad value in one response", w.changed([]*clientv3.Event{put(2, 5), bad(2)}), "added 10.0.2.0-24 05")
	check("a bad value of a new key", w.changed([]*clientv3.Event{bad(4)}), "")
	check("a delete and a put back", w.changed([]*clientv3.Event{del(3), put(3, 0)}), "")
	check("a delete", w.changed([]*clientv3.Event{del(3)}), "removed 10.0.3.0-24")
	check("a delete of an unknown key", w.changed([]*clientv3.Event{del(9)}), "")

	// Known now: 1 (gen 7) and 2 (gen 5). A relist holds 1 as a bad value, 2 unchanged and
	// 5 new; the next one lacks 2.
	check("a relist", w.relisted(entriesOf(m, []*mvccpb.KeyValue{kv(1, "{"), benchKV(m, 2, 5), benchKV(m, 5, 0)}), nil),
		"added 10.0.5.0-24 00")
	check("a relist without 2", w.relisted(entriesOf(m, []*mvccpb.KeyValue{kv(1, "{"), benchKV(m, 5, 1)}), nil),
		"removed 10.0.2.0-24, added 10.0.5.0-24 01")
	check("a relist with 1 back", w.relisted(entriesOf(m, []*mvccpb.KeyValue{benchKV(m, 1, 7), benchKV(m, 5, 1)}), nil), "")
	// 4 never held a good value: its report is kept, as a key that held one would drop it.
	if w.known.Len() != 2 || len(w.skipped) != 1 {
		t.Errorf("the watcher keeps %d leases and %d skipped keys, want 2 and 1", w.known.Len(), len(w.skipped))
	}
	if n := strings.Count(logged.String(), "skipping malformed lease"); n != 5 {
		t.Errorf("%d malformed values logged, want 5 (one per version)\n%s", n, logged.String())
	}
}

// TestWatchResumesWhenQuorumReturns: a watch that failed because etcd lost its quorum resumes
// once etcd can serve again, not when its backoff ends: here the backoff is an hour, and a
// lease written after the quorum returned must arrive well within the test's bound.
func TestWatchResumesWhenQuorumReturns(t *testing.T) {
	members := etcdtest.StartCluster(t, 3)
	cli := etcdtest.ClusterClient(t, members)
	failed := make(chan error, 1)
	m := New(etcdtest.ClusterClient(t, members), Options{OnWatchRestart: func(err error) {
		select {
		case failed <- err:
		default:
		}
	}})
	out := make(chan subnet.Batch, 16)
	w := newWatcher(m, out)
	w.minBackoff, w.maxBackoff = time.Hour, time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("the watch returned %v", err)
		}
	}()
	bound, stop := context.WithTimeout(t.Context(), 30*time.Second)
	defer stop()
	receive := func(what string) []subnet.Event {
		t.Helper()
		select {
		case b := <-out:
			if b.Partial {
				t.Errorf("%s: a partial batch; etcd's listing is sent whole", what)
			}
			return b.Events
		case <-bound.Done():
			t.Fatalf("no %s within the test's bound", what)
			return nil
		}
	}
	receive("first batch")

	members[0].Stop(t)
	members[1].Stop(t)
	select {
	case err := <-failed:
		t.Logf("the watch failed without a quorum: %v", err)
	case <-bound.Done():
		t.Fatal("the watch did not fail without a quorum")
	}
	members[1].Restart(t)
	v, _ := subnet.LeaseAttrs{PublicIP: netip.MustParseAddr("192.0.2.2"), BackendType: "host-gw"}.MarshalJSON()
	if _, err := cli.Put(t.Context(), m.subnetsDir()+"10.1.2.0-24", string(v)); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if evs := receive("lease written after the quorum returned"); len(evs) != 1 || evs[0].Lease.Key() != "10.1.2.0-24" {
		t.Errorf("events after the quorum returned: %v", evs)
	}
	t.Logf("the lease arrived %v after it was written", time.Since(start))
}
