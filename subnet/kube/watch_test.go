package kube

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/subnet"
)

// offlineManager is a manager of node "me" whose API server is never reached, for a watcher
// whose cache the test fills, and the network config it watches with.
func offlineManager(t testing.TB) (*Manager, *subnet.Config) {
	t.Helper()
	m, err := New(Config{NodeName: "me", REST: &rest.Config{Host: "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	return m, cfg
}

// TestWatcherClaims runs the watcher's batches on a cache filled by hand, as the reflector
// fills it, through the cases of two nodes on one podCIDR (TestKube/DuplicatePodCIDRs
// runs them against the API server): a newcomer does not displace the holder, nor does the
// deletion of a stale duplicate remove its lease; the next claimant takes the place of a
// holder that goes; the own node comes first; a peer's malformed lease keeps its last good
// one, the own node's is removed.
func TestWatcherClaims(t *testing.T) {
	m, cfg := offlineManager(t)
	skips := map[string]int{}
	m.onSkip = func(node string, _ error) { skips[node]++ }
	out := make(chan subnet.Batch, 1)
	w := m.newWatcher(cfg, out)
	// The first list, empty, is in: the nodes come as the watch's events.
	if err := w.store.Replace(nil, ""); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	node := func(name, cidr, ip string, age int) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(base.Add(time.Duration(age) * time.Second)),
				Annotations: map[string]string{m.ann.managed: "true", m.ann.backendType: "vxlan",
					m.ann.backendData: `{"VNI":1,"VtepMAC":"c6:d2:32:00:00:01"}`, m.ann.publicIP: ip}},
			Spec: corev1.NodeSpec{PodCIDR: cidr},
		}
	}
	add := func(n *corev1.Node) {
		t.Helper()
		if err := w.store.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	del := func(name string) {
		t.Helper()
		if err := w.store.Delete(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	batch := func(step, want string) {
		t.Helper()
		if err := w.flush(t.Context()); err != nil {
			t.Fatal(err)
		}
		got := ""
		select {
		case b := <-out:
			if b.Partial {
				t.Errorf("%s: a partial batch after the first list", step)
			}
			for _, e := range b.Events {
				got += fmt.Sprintf("%s %s %s;", e.Type, e.Lease.Key(), e.Lease.Attrs.PublicIP)
			}
		default:
		}
		if got != want {
			t.Errorf("%s: batch %q, want %q", step, got, want)
		}
	}
	const added, removed = "added", "removed"
	ev := func(typ, key, ip string) string { return fmt.Sprintf("%s %s %s;", typ, key, ip) }

	add(node("b", "10.1.0.0/24", "192.0.2.2", 0))
	batch("first", ev(added, "10.1.0.0-24", "192.0.2.2"))
	add(node("a", "10.1.0.0/24", "192.0.2.1", 10)) // younger; its name sorts first
	batch("a on b's podCIDR", "")
	del("a")
	batch("a deleted", "")
	add(node("a", "10.1.0.0/24", "192.0.2.1", 10))
	batch("a again", "")
	if skips["a"] != 2 {
		t.Errorf("a reported as skipped %d times, want twice (once each time it came)", skips["a"])
	}
	del("b")
	batch("b deleted", ev(added, "10.1.0.0-24", "192.0.2.1"))
	del("a")
	batch("a deleted too", ev(removed, "10.1.0.0-24", "invalid IP"))

	add(node("c", "10.2.0.0/24", "192.0.2.3", 0))
	batch("c", ev(added, "10.2.0.0-24", "192.0.2.3"))
	add(node("me", "10.2.0.0/24", "192.0.2.4", 10))
	batch("the own node on c's podCIDR", ev(added, "10.2.0.0-24", "192.0.2.4"))
	del("c")
	batch("c deleted", "")

	// A holder's change is sent; moved to a free podCIDR, it leaves the other claimant
	// its old one.
	add(node("d", "10.3.0.0/24", "192.0.2.5", 20))
	batch("d", ev(added, "10.3.0.0-24", "192.0.2.5"))
	add(node("me", "10.2.0.0/24", "192.0.2.6", 10))
	batch("the own node's address changed", ev(added, "10.2.0.0-24", "192.0.2.6"))
	add(node("e", "10.3.0.0/24", "192.0.2.7", 30))
	batch("e on d's podCIDR", "")
	add(node("d", "10.4.0.0/24", "192.0.2.5", 20))
	batch("d moved", ev(added, "10.4.0.0-24", "192.0.2.5")+ev(added, "10.3.0.0-24", "192.0.2.7"))

	bad := node("d", "10.4.0.0/24", "192.0.2.5", 20)
	bad.Annotations[m.ann.backendData] = `{"VNI":`
	add(bad)
	batch("d malformed", "")
	own := node("me", "10.2.0.0/24", "192.0.2.6", 10)
	own.Annotations[m.ann.backendData] = `{"VNI":`
	add(own)
	batch("the own node malformed", ev(removed, "10.2.0.0-24", "invalid IP"))
	add(node("me", "10.2.0.0/24", "192.0.2.6", 10))
	batch("the own node good again", ev(added, "10.2.0.0-24", "192.0.2.6"))

	// me, d (its last good lease) and e.
	if w.known.Len() != 3 || w.claims.Len() != 3 {
		t.Errorf("the watcher keeps %d nodes, %d claims; want 3, 3", w.known.Len(), w.claims.Len())
	}

	// What the watcher keeps of a node is the cache's current record once it has read it:
	// the records the cache replaced are not kept alive, nor one whose change left the lease
	// as it was.
	add(node("me", "10.2.0.0/24", "192.0.2.8", 10))
	batch("the own node's address changed again", ev(added, "10.2.0.0-24", "192.0.2.8"))
	e := node("e", "10.3.0.0/24", "192.0.2.7", 30)
	e.Annotations[m.ann.publicIPv6] = "2001:db8::7" // watched, not in an IPv4 network's lease
	add(e)
	batch("a change of e that leaves its lease as it was", "")
	for _, n := range []string{"me", "e"} {
		if tr, ok := w.known.Get(n); !ok || tr.rec != w.store.get(n) {
			t.Errorf("the watcher keeps a record of %s other than the cache's", n)
		}
	}
}

// TestWatcherPartialBatches drives the cache as the reflector's streamed list does (its own
// store makes each record through the Transformer, and the list ends with a Replace of
// them): the leases streamed so far go out as partial batches; the whole batch that ends the
// list holds only what the list changed, and goes out even when that is nothing; a node
// streamed by an attempt the list does not end with is removed; a relist's stream is not
// filed before its Replace.
func TestWatcherPartialBatches(t *testing.T) {
	m, cfg := offlineManager(t)
	node := func(name, cidr, ip string) *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{m.ann.managed: "true", m.ann.backendType: "vxlan",
				m.ann.backendData: `{"VNI":1,"VtepMAC":"c6:d2:32:00:00:01"}`, m.ann.publicIP: ip}},
			Spec: corev1.NodeSpec{PodCIDR: cidr},
		}
	}
	for _, stale := range []bool{false, true} {
		t.Run(fmt.Sprintf("stale=%t", stale), func(t *testing.T) {
			out := make(chan subnet.Batch, 1)
			w := m.newWatcher(cfg, out)
			tr := w.store.Transformer()
			stream := func(ns ...*corev1.Node) []any {
				t.Helper()
				var recs []any
				for _, n := range ns {
					r, err := tr(n)
					if err != nil {
						t.Fatal(err)
					}
					recs = append(recs, r)
				}
				return recs
			}
			batch := func(step string, partial bool, want string) {
				t.Helper()
				if err := w.flush(t.Context()); err != nil {
					t.Fatal(err)
				}
				got, sent := "", false
				select {
				case b := <-out:
					sent = true
					if b.Partial != partial {
						t.Errorf("%s: partial %t, want %t", step, b.Partial, partial)
					}
					for _, e := range b.Events {
						got += fmt.Sprintf("%s %s;", e.Type, e.Lease.Key())
					}
				default:
				}
				if got != want || !sent {
					t.Errorf("%s: batch %q (sent %t), want %q", step, got, sent, want)
				}
			}

			list := stream(node("a", "10.1.0.0/24", "192.0.2.1"))
			batch("a streamed", true, "added 10.1.0.0-24;")
			if stale {
				// An attempt that streamed d broke off; the list ends with another.
				stream(node("d", "10.4.0.0/24", "192.0.2.4"))
				batch("d streamed", true, "added 10.4.0.0-24;")
			}
			list = append(list, stream(node("b", "10.2.0.0/24", "192.0.2.2"))...)
			batch("b streamed", true, "added 10.2.0.0-24;")
			if err := w.store.Replace(list, "1"); err != nil {
				t.Fatal(err)
			}
			if stale {
				batch("the list is in", false, "removed 10.4.0.0-24;")
			} else {
				batch("the list is in", false, "")
			}

			// A relist: its stream is not filed, its Replace brings the changes.
			relist := stream(node("a", "10.1.0.0/24", "192.0.2.1"), node("c", "10.3.0.0/24", "192.0.2.3"))
			if w.store.get("c") != nil {
				t.Error("a relist's streamed node filed before its Replace")
			}
			if err := w.flush(t.Context()); err != nil {
				t.Fatal(err)
			}
			if len(out) != 0 {
				t.Errorf("relist streamed: a batch %+v; the relist's Replace has not come", <-out)
			}
			if err := w.store.Replace(relist, "2"); err != nil {
				t.Fatal(err)
			}
			batch("relisted", false, "removed 10.2.0.0-24;added 10.3.0.0-24;")
		})
	}
}
