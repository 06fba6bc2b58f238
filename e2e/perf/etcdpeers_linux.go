package perf

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/subnet"
)

const (
	// txnOps is how many leases go in one etcd transaction: under etcd's default limit of
	// 128 operations.
	txnOps = 100
	// leaseTTL is the TTL flannel gives a lease's etcd lease (24 h).
	leaseTTL = 24 * 60 * 60
)

// etcdPeers writes fake peer leases in flannel's etcd layout, all attached to one etcd lease
// with flannel's TTL.
type etcdPeers struct {
	cli   *clientv3.Client
	dir   string // <prefix>/subnets/
	lease clientv3.LeaseID
}

func newEtcdPeers(ctx context.Context, cli *clientv3.Client, prefix string) (*etcdPeers, error) {
	l, err := cli.Grant(ctx, leaseTTL)
	if err != nil {
		return nil, fmt.Errorf("granting an etcd lease of %d s for the fake peers: %w", leaseTTL, err)
	}
	return &etcdPeers{cli: cli, dir: prefix + "/subnets/", lease: l.ID}, nil
}

func (e *etcdPeers) key(sn netip.Prefix) string { return e.dir + subnet.Key(sn, netip.Prefix{}) }

// putOp is the put of peer i's lease.
func (e *etcdPeers) putOp(i int) (clientv3.Op, error) {
	sn, attrs := peer(i)
	val, err := attrs.MarshalJSON()
	if err != nil {
		return clientv3.Op{}, fmt.Errorf("encoding the lease of peer %d: %w", i, err)
	}
	return clientv3.OpPut(e.key(sn), string(val), clientv3.WithLease(e.lease)), nil
}

// put writes the leases of peers from..to (inclusive), txnOps to a transaction.
func (e *etcdPeers) put(ctx context.Context, from, to int) error {
	return e.batches(ctx, from, to, e.putOp)
}

// putOne writes peer i's lease alone, as a joining node would.
func (e *etcdPeers) putOne(ctx context.Context, i int) error {
	op, err := e.putOp(i)
	if err != nil {
		return err
	}
	if _, err := e.cli.Do(ctx, op); err != nil {
		return fmt.Errorf("putting the lease of peer %d: %w", i, err)
	}
	return nil
}

// delete removes the leases of peers from..to (inclusive).
func (e *etcdPeers) delete(ctx context.Context, from, to int) error {
	return e.batches(ctx, from, to, func(i int) (clientv3.Op, error) {
		sn, _ := peer(i)
		return clientv3.OpDelete(e.key(sn)), nil
	})
}

func (e *etcdPeers) batches(ctx context.Context, from, to int, op func(i int) (clientv3.Op, error)) error {
	for lo := from; lo <= to; lo += txnOps {
		hi := min(lo+txnOps-1, to)
		ops := make([]clientv3.Op, 0, hi-lo+1)
		for i := lo; i <= hi; i++ {
			o, err := op(i)
			if err != nil {
				return err
			}
			ops = append(ops, o)
		}
		if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("etcd transaction on the leases of peers %d to %d: %w", lo, hi, err)
		}
	}
	return nil
}

// listAll asks etcd for every lease in the subnets directory in one request, linearizable
// as a daemon's listing is, and decodes none of them: how long etcd takes to hand over the
// leases a cold start waits for, the datastore's part of its floor, as kernelFloor is the
// kernel's. It returns the time and how many leases came.
func (e *etcdPeers) listAll(ctx context.Context) (time.Duration, int, error) {
	start := time.Now()
	resp, err := e.cli.Get(ctx, e.dir, clientv3.WithPrefix())
	took := time.Since(start)
	if err != nil {
		return 0, 0, fmt.Errorf("listing %s: %w", e.dir, err)
	}
	return took, len(resp.Kvs), nil
}

// arrivals watches the peers' leases from the harness, as a daemon's watch sees them, and
// notes when each put arrives: the floor of a daemon's event latency, since no daemon can
// program a route before etcd tells it of the lease. It watches until ctx ends.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time // by key
}

func (e *etcdPeers) watchArrivals(ctx context.Context) *arrivals {
	a := &arrivals{at: map[string]time.Time{}}
	wc := e.cli.Watch(ctx, e.dir, clientv3.WithPrefix(), clientv3.WithCreatedNotify())
	<-wc // the watch is in place before the first put
	go func() {
		for resp := range wc {
			now := time.Now()
			a.mu.Lock()
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypePut {
					if _, seen := a.at[string(ev.Kv.Key)]; !seen {
						a.at[string(ev.Kv.Key)] = now
					}
				}
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// of returns when peer i's lease arrived.
func (a *arrivals) of(e *etcdPeers, i int) (time.Time, bool) {
	sn, _ := peer(i)
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.at[e.key(sn)]
	return t, ok
}
