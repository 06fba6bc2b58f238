package perf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/kubetest"
)

const (
	// nodeName is the node under test.
	nodeName = "bench"
	// kubeEtcdPrefix keeps the API server's objects apart from flannel's keys.
	kubeEtcdPrefix = "/weft-bench-kube/registry"
	// opTimeout bounds the harness's own datastore work between runs (writing 20k leases).
	opTimeout = 2 * time.Minute
)

// bench is one run of the benchmark.
type bench struct {
	cfg    Config
	log    *slog.Logger
	node   *cluster.Node
	figs   *figures
	failed atomic.Bool

	turns int // daemonOrder's calls so far

	mu     sync.Mutex
	errors []string
}

// fail records an error of the run; the figure it concerns is missing or a bound.
func (b *bench) fail(format string, args ...any) {
	b.failed.Store(true)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errors = append(b.errors, fmt.Sprintf(format, args...))
}

// clusterLog hands the cluster's progress messages to the logger (at debug level) and tells
// it to keep its files (the daemons' logs) when the run failed.
type clusterLog struct{ b *bench }

func (l clusterLog) Logf(format string, args ...any) { l.b.log.Debug(fmt.Sprintf(format, args...)) }
func (l clusterLog) Failed() bool                    { return l.b.failed.Load() }

// Run measures the daemons that cfg names, one after the other on one node (two for the
// throughput figures), and returns the report. It needs root. An error means the harness
// itself could not run; a daemon that fails leaves its figures missing and its error in the
// report.
func Run(ctx context.Context, cfg Config, log *slog.Logger) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b := &bench{cfg: cfg, log: log, figs: newFigures()}
	rep := &Report{Started: time.Now(), Daemons: cfg.Daemons()}
	var errs []error
	if len(cfg.Sizes) > 0 || len(cfg.EventSizes) > 0 || cfg.Bulk > 0 {
		if err := b.runEtcd(ctx); err != nil {
			errs = append(errs, fmt.Errorf("etcd mode: %w", err))
		}
	}
	if len(cfg.KubeSizes) > 0 && ctx.Err() == nil {
		if err := b.runKube(ctx); err != nil {
			errs = append(errs, fmt.Errorf("Kubernetes mode: %w", err))
		}
	}
	if cfg.ThroughputBytes > 0 && ctx.Err() == nil {
		if err := b.runThroughput(ctx); err != nil {
			errs = append(errs, fmt.Errorf("throughput: %w", err))
		}
	}
	b.figs.into(rep)
	rep.Errors = b.errors
	rep.Took = time.Since(rep.Started)
	if err := errors.Join(errs...); err != nil {
		return rep, err
	}
	return rep, ctx.Err()
}

// clusterDir is where a mode's cluster keeps its files: under Config.Dir if set.
func (b *bench) clusterDir(mode string) string {
	if b.cfg.Dir == "" {
		return ""
	}
	return filepath.Join(b.cfg.Dir, mode)
}

// daemonOrder is the order of the daemons in the next round of a figure (a repetition, the
// bulk join): turn about across the whole run, so that neither always runs on a machine the
// other has just warmed up, nor goes first in two of a size's three repetitions every time.
func (b *bench) daemonOrder() []string {
	d := b.cfg.Daemons()
	if b.turns%2 == 1 {
		slices.Reverse(d)
	}
	b.turns++
	return d
}

// runEtcd measures the etcd-mode figures: for each number of peers, ascending, the cold
// starts, then the event latency on the last run of each daemon, then the bulk join.
func (b *bench) runEtcd(ctx context.Context) error {
	cfg := b.cfg
	c, err := cluster.New(clusterLog{b}, cluster.Options{NetConf: NetConf, Dir: b.clusterDir("etcd")})
	if err != nil {
		return err
	}
	defer b.closeCluster(c)
	if b.node, err = c.AddNode(nodeName); err != nil {
		return err
	}
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	peers, err := newEtcdPeers(octx, c.Etcd(), c.EtcdPrefix())
	cancel()
	if err != nil {
		return err
	}

	sizes := slices.Concat(cfg.Sizes, cfg.EventSizes)
	if cfg.Bulk > 0 {
		sizes = append(sizes, cfg.BulkBase)
	}
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	have := 0
	for _, n := range sizes {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.datastore(ctx, "putting the peers' leases", func(ctx context.Context) error {
			if n > have {
				return peers.put(ctx, have+1, n)
			}
			return peers.delete(ctx, n+1, have)
		}); err != nil {
			return err
		}
		have = n
		b.log.Info("etcd holds the peers' leases", "peers", n)

		cold, events := slices.Contains(cfg.Sizes, n), slices.Contains(cfg.EventSizes, n)
		reps := 1
		if cold {
			reps = cfg.Reps
		}
		for rep := range reps {
			fl, ls := missing("not measured"), missing("not measured")
			if cold {
				fl, ls = b.floor(n), b.listFloor(ctx, peers, n)
			}
			for _, d := range b.daemonOrder() {
				if err := b.etcdRun(ctx, c, peers, d, n, cold, events && rep == reps-1, fl, ls); err != nil {
					return err
				}
			}
		}
		if cfg.Bulk > 0 && n == cfg.BulkBase {
			for _, d := range b.daemonOrder() {
				if err := b.etcdBulk(ctx, c, peers, d, n); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// datastore runs a step of the harness's own datastore work under opTimeout.
func (b *bench) datastore(ctx context.Context, what string, fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	start := time.Now()
	if err := fn(ctx); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	b.log.Debug(what, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// floor measures the kernel's floor for n peers and records it for every daemon.
func (b *bench) floor(n int) Value {
	f, err := kernelFloor(n, b.log)
	v := seconds(f.took)
	if err != nil {
		b.fail("the kernel's floor with %d peers: %v", n, err)
		v = missing("failed")
	} else {
		b.log.Info("the kernel's floor", "peers", n, "took", v.Format(Duration), "sends", f.sends, "nexthop_objects", f.nexthops, "device", f.device.Round(10*time.Microsecond),
			"fdb", f.each[0].Round(time.Millisecond), "neighbours", f.each[1].Round(time.Millisecond),
			"nexthops", f.each[2].Round(time.Millisecond), "routes", f.each[3].Round(time.Millisecond))
	}
	for _, d := range b.cfg.Daemons() {
		b.figs.add(figFloor(n), d, v)
	}
	return v
}

// listFloor measures etcd's listing of the n peers' leases (etcdPeers.listAll) and records it
// for every daemon.
func (b *bench) listFloor(ctx context.Context, peers *etcdPeers, n int) Value {
	lctx, cancel := context.WithTimeout(ctx, opTimeout)
	took, got, err := peers.listAll(lctx)
	cancel()
	v := seconds(took)
	switch {
	case err != nil:
		b.fail("etcd's listing of %d leases: %v", n, err)
		v = missing("failed")
	case got < n:
		b.fail("etcd's listing of %d leases: it sent %d", n, got)
		v = missing("failed")
	default:
		b.log.Info("etcd's listing", "leases", got, "took", v.Format(Duration))
	}
	for _, d := range b.cfg.Daemons() {
		b.figs.add(figListFloor(n), d, v)
	}
	return v
}

// etcdRun is one cold start of a daemon with n peers, recorded if cold (with its ratios to
// the kernel's floor fl and to the sum of the floors, fl and etcd's listing ls), followed by
// the event latency if withEvents.
func (b *bench) etcdRun(ctx context.Context, c *cluster.Cluster, peers *etcdPeers, daemon string, n int, cold, withEvents bool, fl, ls Value) error {
	r, err := b.startDaemon(daemon, peerSet(1, n))
	if err != nil {
		return err
	}
	res := r.coldStart(ctx)
	if cold {
		b.figs.add(figEnv(n), daemon, res.env)
		b.figs.add(figFirst(n), daemon, res.first)
		b.figs.add(figAll(n), daemon, res.all)
		b.figs.add(figFloorRatio(n), daemon, ratio(res.all, fl))
		b.figs.add(figFloorsRatio(n), daemon, ratio(res.all, sum(fl, ls)))
		b.figs.add(figRSS(n), daemon, res.rss)
		b.figs.add(figPeak(n), daemon, res.peak)
		b.figs.add(figPeakRatio(n), daemon, ratio(res.peak, res.rss))
	}
	var evErr error
	if withEvents {
		ev := events{p50: missing("no cold start"), p99: missing("no cold start"), floor50: missing("no cold start"), floor99: missing("no cold start")}
		if res.ok {
			wctx, stop := context.WithCancel(ctx)
			arr := peers.watchArrivals(wctx)
			ev, evErr = r.eventLatency(ctx, peers.putOne, n+1, func(i int) (time.Time, bool) { return arr.of(peers, i) })
			stop()
			if evErr != nil {
				b.fail("%s: event latency with %d peers: %v", daemon, n, evErr)
				ev = events{p50: missing("failed"), p99: missing("failed"), floor50: missing("failed"), floor99: missing("failed")}
			}
		}
		b.figs.add(figP50(n), daemon, ev.p50)
		b.figs.add(figP99(n), daemon, ev.p99)
		b.figs.add(figFloor50(n), daemon, ev.floor50)
		b.figs.add(figFloor99(n), daemon, ev.floor99)
		if ev.timeouts > 0 {
			b.figs.note(figP50(n), daemon, fmt.Sprintf("%d of %d events timed out after %v", ev.timeouts, b.cfg.Events, b.cfg.EventTimeout))
		}
	}
	r.stop()
	return b.datastore(ctx, "removing the node's own lease and the events' leases", func(ctx context.Context) error {
		if withEvents {
			if err := peers.delete(ctx, n+1, n+b.cfg.Events); err != nil {
				return err
			}
		}
		return deleteOwnLease(c, b.node)
	})
}

// etcdBulk starts a daemon with n peers and measures a bulk join.
func (b *bench) etcdBulk(ctx context.Context, c *cluster.Cluster, peers *etcdPeers, daemon string, n int) error {
	r, err := b.startDaemon(daemon, peerSet(1, n))
	if err != nil {
		return err
	}
	res := r.coldStart(ctx)
	v := missing("no cold start")
	if res.ok {
		v = r.bulkJoin(ctx, peers.put, n+1, n+b.cfg.Bulk)
	}
	b.figs.add(figBulk(n, b.cfg.Bulk), daemon, v)
	r.stop()
	return b.datastore(ctx, "removing the node's own lease and the bulk's leases", func(ctx context.Context) error {
		if err := peers.delete(ctx, n+1, n+b.cfg.Bulk); err != nil {
			return err
		}
		return deleteOwnLease(c, b.node)
	})
}

// deleteOwnLease removes the leases the node under test holds (those with its address), so
// that the next run allocates a subnet as this one did.
func deleteOwnLease(c *cluster.Cluster, n *cluster.Node) error {
	leases, err := c.Leases()
	if err != nil {
		return err
	}
	for _, l := range leases {
		if l.Attrs.PublicIP == n.IP {
			if err := c.DeleteLease(l.Subnet); err != nil {
				return err
			}
		}
	}
	return nil
}

// runKube measures the Kubernetes-mode figures on a real kube-apiserver.
func (b *bench) runKube(ctx context.Context) error {
	var srv *kubetest.Server
	c, err := cluster.New(clusterLog{b}, cluster.Options{
		NetConf: NetConf, Dir: b.clusterDir("kube"),
		Kube: &cluster.KubeOptions{Kubeconfig: func(*cluster.Node) ([]byte, error) {
			rc := srv.Admin()
			return cluster.Kubeconfig(rc.Host, rc.CAData, rc.BearerToken)
		}},
	})
	if err != nil {
		return err
	}
	defer b.closeCluster(c)
	dir := filepath.Join(c.Dir(), "kube-apiserver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	srv, err = kubetest.Launch(dir, c.APIServerOptions(kubeEtcdPrefix))
	if err != nil {
		return err
	}
	defer srv.Close() // before the cluster: it runs in the underlay
	cs, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		return fmt.Errorf("client of %s: %w", srv.URL(), err)
	}
	peers, err := newKubePeers(cs)
	if err != nil {
		return err
	}
	if b.node, err = c.AddNode(nodeName); err != nil {
		return err
	}

	sizes := slices.Sorted(slices.Values(b.cfg.KubeSizes))
	have := 0
	for _, n := range slices.Compact(sizes) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.datastore(ctx, "creating the peers' Nodes", func(ctx context.Context) error {
			return peers.create(ctx, have+1, n)
		}); err != nil {
			return err
		}
		have = n
		b.log.Info("the API server holds the peers' Nodes", "peers", n)
		all := map[string][]Value{} // by daemon: its times to all routes
		for range b.cfg.Reps {
			for _, d := range b.daemonOrder() {
				if err := b.datastore(ctx, "resetting the node's own Node", func(ctx context.Context) error {
					return peers.resetOwn(ctx, nodeName)
				}); err != nil {
					return err
				}
				r, err := b.startDaemon(d, peerSet(1, n))
				if err != nil {
					return err
				}
				res := r.coldStart(ctx)
				b.figs.add(figKubeAll(n), d, res.all)
				all[d] = append(all[d], res.all)
				b.figs.add(figKubeRSS(n), d, res.rss)
				b.figs.add(figKubePeak(n), d, res.peak)
				if storm := min(n, kubeStormMax); res.ok {
					b.figs.add(figKubeStorm(n, storm), d, r.nodeStorm(ctx, peers, storm))
				}
				r.stop()
			}
		}
		// After the daemons: a stream before them warms the API server for the first daemon
		// (at 65,000 Nodes weftd then took 2.98 s to all routes, against 3.73 s without).
		stream := b.kubeStream(ctx, srv.Admin(), n)
		b.kubeFloorsRatio(n, stream, all)
	}
	return nil
}

// kubeFloorsRatio records the ratio of each Kubernetes-mode time to all routes (all, by
// daemon) to the sum of the floors: the API server's stream and the kernel's floor for n
// peers, measured here when the etcd-mode figures have none.
func (b *bench) kubeFloorsRatio(n int, stream Value, all map[string][]Value) {
	first := b.cfg.Daemons()[0]
	fl := b.figs.median(figFloor(n), first)
	if !b.figs.has(figFloor(n), first) {
		fl = b.floor(n)
	}
	for d, times := range all {
		for _, t := range times {
			b.figs.add(figKubeFloorsRatio(n), d, ratio(t, sum(stream, fl)))
		}
	}
}

// kubeStream measures how long the API server takes to stream n Nodes to a client that keeps
// nothing (streamNodes), records it for every daemon and returns it.
func (b *bench) kubeStream(ctx context.Context, admin *rest.Config, n int) Value {
	var v Value
	got, err := streamNodes(ctx, admin)
	switch {
	case err != nil:
		b.fail("streaming %d Nodes: %v", n, err)
		v = missing("failed")
	case got.nodes < n:
		b.fail("streaming %d Nodes: the API server sent %d", n, got.nodes)
		v = missing("failed")
	default:
		v = seconds(got.took)
		b.log.Info("the API server's streamed list", "nodes", got.nodes, "took", v.Format(Duration))
	}
	for _, d := range b.cfg.Daemons() {
		b.figs.add(figKubeStream(n), d, v)
	}
	return v
}

// closeCluster closes c, the node under test emptied first (resetNode): a namespace destroyed
// with the routes of 65,000 peers through nexthop objects holds the kernel's routing lock for
// about 40 s in the background (linux.Plane.drain), and whatever runs next waits for it.
func (b *bench) closeCluster(c *cluster.Cluster) {
	if b.node != nil && slices.Contains(c.Nodes(), b.node) {
		if err := resetNode(b.node); err != nil {
			b.log.Warn("emptying the node before closing the cluster", "error", err)
		}
	}
	if err := c.Close(); err != nil {
		b.log.Warn("closing the cluster", "error", err)
	}
}
