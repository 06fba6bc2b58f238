package kube

import (
	"context"

	"k8s.io/client-go/tools/cache"

	"github.com/weftnet/weft/subnet"
)

// WatchWithCache is Watch that first hands the test the informer's store, so that it can
// look at what the cache holds.
func (m *Manager) WatchWithCache(ctx context.Context, out chan<- []subnet.Event, store chan<- cache.Store) error {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return err
	}
	w := m.newWatcher(cfg, out)
	store <- w.inf.GetStore()
	return w.run(ctx)
}

// Trim is the informer's transform.
func (m *Manager) Trim(obj any) (any, error) { return m.ann.trim(obj) }
