package etcd

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/subnet"
)

// benchLeases is the number of peers the watcher benchmarks run with: the large cluster of
// issue 10.
const benchLeases = 20000

// benchKV is the key-value of lease i in flannel's layout, as a vxlan node writes it; gen
// changes its VTEP MAC.
func benchKV(m *Manager, i, gen int) *mvccpb.KeyValue {
	sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24)
	attrs := subnet.LeaseAttrs{
		PublicIP:    netip.AddrFrom4([4]byte{192, 168, byte(i >> 8), byte(i)}),
		BackendType: "vxlan",
		BackendData: []byte(fmt.Sprintf(`{"VNI":1,"VtepMAC":"c6:d2:32:%02x:%02x:%02x"}`, byte(i>>8), byte(i), byte(gen))),
	}
	v, err := attrs.MarshalJSON()
	if err != nil {
		panic(err)
	}
	return &mvccpb.KeyValue{Key: []byte(m.subnetsDir() + subnet.Key(sn, netip.Prefix{})), Value: v, ModRevision: int64(gen*benchLeases + i + 1)}
}

func benchListing(m *Manager) []*mvccpb.KeyValue {
	kvs := make([]*mvccpb.KeyValue, benchLeases)
	for i := range kvs {
		kvs[i] = benchKV(m, i, 0)
	}
	return kvs
}

func benchWatcher(m *Manager) *watcher {
	return newWatcher(m, nil)
}

// BenchmarkWatchListing is the first listing of 20k leases: parsing every value and making
// the events. It also reports what the watcher keeps afterwards, per lease.
func BenchmarkWatchListing(b *testing.B) {
	m := New(nil, Options{})
	kvs := benchListing(m)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := benchWatcher(m)
	if evs := w.relisted(entriesOf(m, kvs), nil); len(evs) != benchLeases {
		b.Fatalf("%d events, want %d", len(evs), benchLeases)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(w)
	kept := float64(after.HeapAlloc-before.HeapAlloc) / benchLeases

	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		benchWatcher(m).relisted(entriesOf(m, kvs), nil)
	}
	b.ReportMetric(kept, "kept-B/lease")
}

// BenchmarkWatchRelist is a listing again after a compaction, with nothing changed: no event.
func BenchmarkWatchRelist(b *testing.B) {
	m := New(nil, Options{})
	kvs := benchListing(m)
	w := benchWatcher(m)
	w.relisted(entriesOf(m, kvs), nil)
	b.ReportAllocs()
	for b.Loop() {
		if evs := w.relisted(entriesOf(m, kvs), nil); len(evs) != 0 {
			b.Fatalf("%d events, want none", len(evs))
		}
	}
}

// BenchmarkWatchEvent is one lease changing while the watcher knows 20k.
func BenchmarkWatchEvent(b *testing.B) {
	m := New(nil, Options{})
	w := benchWatcher(m)
	w.relisted(entriesOf(m, benchListing(m)), nil)
	puts := [2][]*clientv3.Event{
		{{Type: mvccpb.PUT, Kv: benchKV(m, 4242, 1)}},
		{{Type: mvccpb.PUT, Kv: benchKV(m, 4242, 2)}},
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if evs := w.changed(puts[i%2]); len(evs) != 1 {
			b.Fatalf("%d events, want 1", len(evs))
		}
		i++
	}
}

// entriesOf is a listing's key-values as entries not parsed yet, as the watch's relists make them.
func entriesOf(m *Manager, kvs []*mvccpb.KeyValue) []entry {
	out := make([]entry, len(kvs))
	for i, kv := range kvs {
		out[i] = m.unparsed(kv)
	}
	return out
}
