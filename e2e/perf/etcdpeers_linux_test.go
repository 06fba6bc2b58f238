package perf

import (
	"context"
	"testing"
	"time"

	"github.com/weftnet/weft/internal/etcdtest"
)

// TestListAll: etcd's listing floor counts every lease of the peers, and only those: a key
// beside the subnets directory (the network's config) is not in it.
func TestListAll(t *testing.T) {
	cli := etcdtest.Start(t, etcdtest.Options{}).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "/weft-test/network"
	if _, err := cli.Put(ctx, prefix+"/config", `{"Network":"10.0.0.0/8"}`); err != nil {
		t.Fatal(err)
	}
	peers, err := newEtcdPeers(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	const n = 250
	if err := peers.put(ctx, 1, n); err != nil {
		t.Fatal(err)
	}
	took, got, err := peers.listAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("listed %d leases, etcd holds %d", got, n)
	}
	if took <= 0 || took > 30*time.Second {
		t.Errorf("listing took %v", took)
	}
	if err := peers.delete(ctx, 101, n); err != nil {
		t.Fatal(err)
	}
	if _, got, err = peers.listAll(ctx); err != nil || got != 100 {
		t.Errorf("after deleting 150 of %d: listed %d leases (%v), want 100", n, got, err)
	}
}
