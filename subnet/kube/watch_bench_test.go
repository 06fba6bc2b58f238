package kube

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/internal/hashindex"
	"github.com/weftnet/weft/subnet"
)

// benchNodes is the number of peer nodes the watcher benchmarks run with.
const benchNodes = 20000

// benchNode is peer i as flanneld or weftd annotates it; gen changes its VTEP MAC.
func benchNode(a annotations, i, gen int) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), Annotations: map[string]string{
			a.managed:     "true",
			a.backendType: "vxlan",
			a.backendData: fmt.Sprintf(`{"VNI":1,"VtepMAC":"c6:d2:32:%02x:%02x:%02x"}`, byte(i>>8), byte(i), byte(gen)),
			a.publicIP:    fmt.Sprintf("192.168.%d.%d", byte(i>>8), byte(i)),
		}},
		Spec: corev1.NodeSpec{PodCIDR: fmt.Sprintf("10.%d.%d.0/24", byte(i>>8), byte(i))},
	}
}

// benchWatch is a watcher whose cache holds 20k peer nodes, all noted as changed, and the
// bytes its cache keeps per node. The reflector never runs: the cache is filled here, as
// its watch would fill it.
func benchWatch(b *testing.B) (*watcher, chan subnet.Batch, float64) {
	m, cfg := offlineManager(b)
	out := make(chan subnet.Batch, 1)
	w := m.newWatcher(cfg, out)
	// The first list, empty, is in: the nodes come as the watch's events, and the batches are
	// whole.
	if err := w.store.Replace(nil, ""); err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range benchNodes {
		if err := w.store.Add(benchNode(m.ann, i, 0)); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	// Less the names noted as changed, which the first batch takes.
	return w, out, float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/benchNodes - changedBytes(len(w.store.changed))
}

// changedBytes is about what a map[string]bool of n names takes: n slots of 17 bytes in a
// table of 8 in 7 used, grown in powers of two.
func changedBytes(n int) float64 {
	slots := 8
	for slots*7/8 < n {
		slots *= 2
	}
	return float64(slots*17) / float64(n)
}

// flushOne makes one batch of what is noted and returns its length.
func flushOne(b *testing.B, w *watcher, out chan subnet.Batch) int {
	if err := w.flush(b.Context()); err != nil {
		b.Fatal(err)
	}
	select {
	case got := <-out:
		if got.Partial {
			b.Fatal("a partial batch: the cache is listed")
		}
		return len(got.Events)
	default:
		return 0
	}
}

// BenchmarkKubeWatchListing is the first batch of 20k nodes: reading each node's lease and
// making the events. It also reports what the cache keeps per node, and what the watcher
// keeps afterwards.
func BenchmarkKubeWatchListing(b *testing.B) {
	w, out, cached := benchWatch(b)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	if n := flushOne(b, w, out); n != benchNodes {
		b.Fatalf("%d events, want %d", n, benchNodes)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	kept := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / benchNodes

	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		w.known = hashindex.New(hashindex.String, (*tracked).name)
		w.claims = hashindex.New(hashSubnets, func(t *tracked) subnets { return t.sn })
		for i := range benchNodes {
			w.store.changed[fmt.Sprintf("node-%05d", i)] = true
		}
		b.StartTimer()
		flushOne(b, w, out)
	}
	b.ReportMetric(kept, "kept-B/node")
	b.ReportMetric(cached, "cache-B/node")
}

// BenchmarkKubeWatchEvent is one node changing its lease while the watcher knows 20k.
func BenchmarkKubeWatchEvent(b *testing.B) {
	w, out, _ := benchWatch(b)
	flushOne(b, w, out)
	changed := [2]*corev1.Node{benchNode(w.m.ann, 4242, 1), benchNode(w.m.ann, 4242, 2)}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := w.store.Update(changed[i%2]); err != nil {
			b.Fatal(err)
		}
		if got := flushOne(b, w, out); got != 1 {
			b.Fatalf("%d events, want 1", got)
		}
		i++
	}
}
