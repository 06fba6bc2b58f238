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

// TestWatcherClaims runs the watcher's batches on a cache filled by hand, as the reflector
// fills it, through the cases of two nodes on one podCIDR (TestKube/DuplicatePodCIDRs
// runs them against the API server): a newcomer does not displace the holder, nor does the
// deletion of a stale duplicate remove its lease; the next claimant takes the place of a
// holder that goes; the own node comes first; a peer's malformed lease keeps its last good
// one, the own node's is removed.
func TestWatcherClaims(t *testing.T) {
	m, err := New(Config{NodeName: "me", REST: &rest.Config{Host: "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := subnet.ParseConfig([]byte(`{"Network":"10.0.0.0/8","Backend":{"Type":"vxlan"}}`))
	if err != nil {
		t.Fatal(err)
	}
	skips := map[string]int{}
	m.onSkip = func(node string, _ error) { skips[node]++ }
	out := make(chan []subnet.Event, 1)
	w := m.newWatcher(cfg, out)
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
		case evs := <-out:
			for _, e := range evs {
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
}
