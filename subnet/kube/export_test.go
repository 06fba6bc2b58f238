package kube

import (
	"context"

	"github.com/weftnet/weft/subnet"
)

// CacheRead reads the watch's cache: the lease its record of a node gives and the bytes of
// the string the record keeps; ok is false when it holds no record of the node.
type CacheRead func(node string) (l subnet.Lease, kept int, ok bool)

// WatchWithCache is Watch that first hands the test a CacheRead of its cache.
func (m *Manager) WatchWithCache(ctx context.Context, out chan<- subnet.Batch, read chan<- CacheRead) error {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return err
	}
	w := m.newWatcher(cfg, out)
	read <- func(node string) (subnet.Lease, int, bool) {
		p := w.store.get(node)
		if p == nil {
			return subnet.Lease{}, 0, false
		}
		l, _, _ := m.recordLease(cfg, p)
		return l, len(p.data), true
	}
	return w.run(ctx)
}
