package etcdtest

import (
	"context"
	"testing"
	"time"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestZZTiming(t *testing.T) {
	t0 := time.Now()
	s := Start(t, Options{})
	t.Logf("start %v", time.Since(t0)); t0 = time.Now()
	c := s.Client(t)
	ctx := context.Background()
	first, _ := c.Put(ctx, "k", "v1")
	c.Put(ctx, "k", "v2")
	t.Logf("puts %v", time.Since(t0)); t0 = time.Now()
	s.Compact(t)
	t.Logf("compact %v", time.Since(t0)); t0 = time.Now()
	wch := c.Watch(ctx, "k", clientv3.WithRev(first.Header.Revision))
	r := <-wch
	t.Logf("watch %v %v", time.Since(t0), r.Err()); t0 = time.Now()
	s.Stop(t)
	t.Logf("stop %v", time.Since(t0)); t0 = time.Now()
	s.Restart(t)
	t.Logf("restart %v", time.Since(t0)); t0 = time.Now()
	c.Get(ctx, "k")
	t.Logf("reconnect get %v", time.Since(t0)); t0 = time.Now()
	t.Cleanup(func() { t.Logf("cleanup %v", time.Since(t0)) })
}
