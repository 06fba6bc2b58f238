package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/netif"
	npkube "github.com/weftnet/weft/netpol/kube"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
	"github.com/weftnet/weft/wgkey"
)

// Deps are what RunWith works with: Run makes them, tests put their own in.
type Deps struct {
	Manager subnet.Manager
	// Plane programs the IPv4 family; PlaneV6 the IPv6 family, when the network enables it
	// and the data plane carries it (nil: it does not). Their Capabilities (Plane's, else
	// PlaneV6's) are what the network config is checked against and the backends built with.
	Plane      backend.Plane
	PlaneV6    backend.Plane
	Interfaces func() ([]netif.Interface, error)
	DefaultIf  func() (string, error)
	// RouteTo names the interface of the route to an address and its source (netif.Choice's);
	// nil: --iface-can-reach is refused.
	RouteTo func(netip.Addr) (string, netip.Addr, error)
	// Pinger sends the overlay probes (Config.ProbeInterval) where the plane's Capabilities
	// have them; nil: no probes.
	Pinger probe.Pinger
	// Events is told what the operator should see of the node; nil: nothing is told (etcd
	// mode). An *events.Recorder posts only while its Run runs: Run starts it beside
	// RunWith, and a caller of RunWith must too.
	Events Events
	// Checker sends the probes' TCP and UDP through the overlay, which find broken checksum
	// offload (Config.TxChecksumOffload); nil: none.
	Checker probe.Checker
	// Policy enforces --network-policy, with the cluster's pods, namespaces and policies read
	// by PolicyWatch, which RunWith runs; both nil: no policy.
	Policy      PolicyPlane
	PolicyWatch *npkube.Watcher
	metrics     *metrics // made by RunWith when nil
}

// Platform is what weftd is given of the operating system it runs on. cmd/weftd builds it
// from the OS's own flags (the data planes' options, DESIGN.md: "OS-only options go to its
// constructor"); Run opens and closes what it names.
type Platform struct {
	// OpenPlanes opens the data planes of the IPv4 and the IPv6 family (plane6 nil: the OS
	// carries no IPv6). Run closes them when it returns; what they programmed stays.
	OpenPlanes func(log *slog.Logger) (plane, plane6 backend.Plane, err error)
	// DefaultIf names the interface of the default route.
	DefaultIf func() (string, error)
	// RouteTo names the interface of the route to an address and its source (netif.Choice's);
	// nil where the OS has none: --iface-can-reach is refused.
	RouteTo func(netip.Addr) (string, netip.Addr, error)
	// Policy opens the plane that enforces NetworkPolicy; nil where the OS has none:
	// --network-policy is refused. It is called after OpenPlanes.
	Policy func(log *slog.Logger) PolicyPlane
}

// Run runs weftd on the OS's data plane until ctx is done. It returns an error only when it
// cannot go on: a bad config, no usable interface, a data plane that cannot be set up.
//
// Run is weftd's one composition root: it makes every part weftd runs with (the data planes,
// the datastore's Manager and its client, the Kubernetes Event recorder, the ICMP sockets of
// the probes, the metrics) and closes each when it returns. It is here rather than in
// cmd/weftd because which parts are made depends on the validated Config and the planes'
// Capabilities (the datastore by --kube-subnet-mgr, the probes where the plane has them), and
// because RunWith, which the tests run with parts of their own, must be wired the same way:
// cmd/weftd only parses flags into a Config and names its OS's Platform.
func Run(ctx context.Context, cfg Config, log *slog.Logger, plat Platform) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	plane, plane6, err := plat.OpenPlanes(log)
	if err != nil {
		return fmt.Errorf("data plane: %w", err)
	}
	defer plane.Close()
	if plane6 != nil {
		defer plane6.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	m := newMetrics()
	deps := Deps{Plane: plane, PlaneV6: plane6, Interfaces: netif.List, DefaultIf: plat.DefaultIf, RouteTo: plat.RouteTo, metrics: m}
	if cfg.KubeSubnetMgr {
		rec := newEventRecorder(log, m)
		km, err := newKubeManager(ctx, &cfg, log, m, rec)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		wg.Go(func() { rec.Run(ctx, eventSink(km)) })
		deps.Manager, deps.Events = km, rec
		if cfg.NetworkPolicy {
			if deps.PolicyWatch, err = npkube.New(km.REST(), policyLog(log)); err != nil {
				return fmt.Errorf("--network-policy: %w", err)
			}
		}
	} else {
		cli, err := etcd.NewClient(cfg.EtcdClient())
		if err != nil {
			return err
		}
		defer cli.Close()
		deps.Manager = etcd.New(cli, etcd.Options{
			Prefix:         cfg.EtcdPrefix,
			Logger:         log,
			OnSkip:         func(string, error) { m.skipped.WithLabelValues(backend.SkipMalformed).Inc() },
			OnWatchRestart: func(error) { m.watchRestarts.Inc() },
			OnRelist:       m.watchRelists.Inc,
		})
	}
	switch {
	case cfg.NetworkPolicy && plat.Policy == nil:
		return errors.New("--network-policy=true: weftd cannot enforce NetworkPolicy on this OS yet")
	case cfg.NetworkPolicy:
		deps.Policy = plat.Policy(log)
	case plat.Policy != nil:
		// Policy off: a table left by a run with it on would go on enforcing stale rules
		// (and deny every new pod), so it goes.
		if err := plat.Policy(log).Remove(); err != nil {
			log.Warn("removing the NetworkPolicy table of an earlier run failed", "err", err)
		}
	}
	if capabilities(deps).Probes && cfg.ProbeInterval > 0 {
		if icmp, err := probe.ListenICMP(); err != nil {
			log.Warn("no overlay probes: cannot open ICMP sockets", "err", err)
		} else {
			defer icmp.Close()
			deps.Pinger = icmp
		}
	}
	if deps.Pinger != nil {
		deps.Checker = probe.ClosedPort{}
	}
	return RunWith(ctx, cfg, log, deps)
}

// RunWith is Run on the given dependencies. It returns once every goroutine it started has
// ended.
func RunWith(ctx context.Context, cfg Config, log *slog.Logger, deps Deps) error {
	if deps.metrics == nil {
		deps.metrics = newMetrics()
	}
	if deps.Events == nil {
		deps.Events = noEvents{}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	d := &daemon{cfg: cfg, log: log, sm: deps.Manager, m: deps.metrics, events: deps.Events, caps: capabilities(deps),
		pending: map[string]struct{}{}}
	// Every kind the plane counts has its series from the start, at 0 until written.
	for _, k := range d.caps.ChangeKinds {
		d.m.changes.WithLabelValues(k)
		d.m.driftRestored.WithLabelValues(k)
	}
	var check func() error
	if c, ok := deps.Manager.(subnet.Checker); ok {
		check = c.Check
	}
	var probe func(context.Context) error
	if p, ok := deps.Manager.(subnet.Prober); ok {
		probe = p.Probe
	}
	d.health = newHealth(cfg, d.m, check, probe)
	d.health.peers = d.peerStatus
	// The cold start is a burst that steady state never repeats (see loop): collected
	// more often meanwhile, its garbage does not double the peak over what the node keeps.
	// A GOGC set lower (or off) stays.
	d.gcPercent = debug.SetGCPercent(startupGCPercent)
	if d.gcPercent < startupGCPercent {
		debug.SetGCPercent(d.gcPercent)
	}
	defer debug.SetGCPercent(d.gcPercent)
	d.m.peers.count = d.peerCounts
	d.m.ready = func() bool { return d.health.readyz() == nil }
	if p, ok := deps.Manager.(subnet.PoolReporter); ok {
		d.m.pool.pool = p.Pool
	}
	wg.Go(func() { d.health.watchDatastore(ctx) })
	if cfg.HealthzPort != 0 {
		stop, err := d.health.serve(netip.AddrPortFrom(netip.MustParseAddr(cfg.HealthzIP), uint16(cfg.HealthzPort)), log, defaultHTTPLimits())
		if err != nil {
			return err
		}
		defer stop()
	}
	if err := d.setUp(ctx, deps); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	d.health.update(func(h *health) { h.offloadStatus = d.paths.offloadStatus })
	if deps.Policy != nil && deps.PolicyWatch != nil {
		d.health.update(func(h *health) { h.policy = errPolicyNotListed })
		report := func(err error, st *status.NetworkPolicy) {
			d.health.update(func(h *health) { h.policy, h.status.NetworkPolicy = err, st })
		}
		wg.Go(func() {
			enforcePolicy(ctx, policyLog(log), d.m, d.events, deps.PolicyWatch, d.cfg.NodeName, deps.Policy, d.podSubnets, report)
		})
	}
	if deps.Pinger != nil && cfg.ProbeInterval > 0 && d.caps.Probes {
		d.startProbes(ctx, &wg, deps.Pinger, deps.Checker)
	}
	return d.loop(ctx, &wg)
}

// capabilities are those of the data plane deps has: the IPv4 family's, else the IPv6
// family's (an IPv6-only node's planes may be IPv6's alone); none without a plane.
func capabilities(deps Deps) backend.Capabilities {
	for _, p := range []backend.Plane{deps.Plane, deps.PlaneV6} {
		if p != nil {
			return p.Capabilities()
		}
	}
	return backend.Capabilities{}
}

type daemon struct {
	cfg    Config
	log    *slog.Logger
	sm     subnet.Manager
	health *health
	m      *metrics
	events Events
	caps   backend.Capabilities // the data plane's

	net *subnet.Config
	ext netif.External
	own subnet.Lease
	mtu int // the pods' MTU: the smallest the families' backends allow
	// nodeID is the node's identity (subnet.LoadNodeID), published with its lease in etcd
	// mode; empty in Kubernetes mode, where the Node object is the node's.
	nodeID string

	// paths are the families the network enables, IPv4 first; made by setUp. Only the loop
	// drives them; readers get view, which the loop publishes after each change of their
	// peer sets (viewStale: not yet).
	paths     families
	view      atomic.Pointer[peersView]
	viewStale bool

	// pending are the lease keys changed since the last convergence, and pendingSince the
	// batches that first saw them: when each came and how many of the keys it brought. A
	// time beside each key would double the set at a cold start, where one batch brings
	// them all (65,000 keys: 6.4 MiB, 2.5 of them left).
	pending      map[string]struct{}
	pendingSince []seenAt

	stored    subnet.LeaseAttrs // the own lease as the datastore last showed it
	inStore   bool              // the own lease is in the datastore
	synced    bool              // the first whole watch batch arrived (subnet.Batch.Partial)
	lastRenew time.Time
	// A renewal runs beside the loop (renewer), which goes on applying the leases meanwhile:
	// a datastore without a quorum holds one for its whole timeout. renewing says one is
	// under way; toRenew asks for one, renewed brings its result back.
	renewing bool
	toRenew  chan subnet.Lease
	renewed  chan renewal
	notified bool // systemd was told weftd is ready
	// startupDone is when the first convergence ended; steady, that the start-up's GOGC
	// is over (startupTail after it).
	startupDone time.Time
	steady      bool
	// gcPercent is the GOGC the start-up's (startupGCPercent) replaces until its end.
	gcPercent int
	ready     bool // the datastore was told the node's network works (Kubernetes: NetworkUnavailable=False)
	// subnets are the own lease's subnets, for readers beside the loop (podSubnets).
	subnets atomic.Pointer[[2]netip.Prefix]
}

// podSubnets are the node's pod subnets (the own lease's), read on any goroutine.
func (d *daemon) podSubnets() []netip.Prefix {
	var out []netip.Prefix
	if sn := d.subnets.Load(); sn != nil {
		for _, p := range sn {
			if p.IsValid() {
				out = append(out, p)
			}
		}
	}
	return out
}

// setUp does everything before the loop: config, interface, backends, lease (with the
// devices made for it), subnet.env.
func (d *daemon) setUp(ctx context.Context, deps Deps) error {
	var err error
	if d.net, err = d.waitConfig(ctx); err != nil {
		return err
	}
	for _, k := range d.net.Ignored {
		d.log.Warn("network config key ignored: flanneld v0.28 does not read it either (a misspelt key, or one of another backend type?)", "key", k)
	}
	planes := map[backend.Family]backend.Plane{backend.IPv4: deps.Plane, backend.IPv6: deps.PlaneV6}
	for _, f := range backend.Families(d.net) {
		if planes[f] == nil {
			key := "EnableIPv4"
			if f == backend.IPv6 {
				key = "EnableIPv6"
			}
			return &subnet.ConfigError{Key: key, Value: "true", Reason: fmt.Sprintf("weftd's data plane carries no %s: it was given no plane for that family", f)}
		}
	}
	ifs, err := deps.Interfaces()
	if err != nil {
		return err
	}
	if d.ext, err = netif.Pick(d.cfg.Choice(d.net, deps.RouteTo), ifs, deps.DefaultIf); err != nil {
		return err
	}
	d.log.Info("using interface", "iface", d.ext.Name, "addr", d.ext.Addr, "public_ip", d.ext.PublicIP,
		"addr6", d.ext.Addr6, "public_ipv6", d.ext.PublicIPv6, "mtu", d.ext.MTU)
	var wgKey backend.Key
	if d.net.Backend.Type == subnet.BackendWireGuard {
		k, created, err := wgkey.Load(d.cfg.WireGuardKeyFile)
		if err != nil {
			return err
		}
		wgKey = k
		d.log.Info("WireGuard key", "file", d.cfg.WireGuardKeyFile, "created", created, "public_key", k.PublicKey().String())
	}
	bs, mtu, err := NewBackends(d.net, d.ext, d.caps, wgKey)
	if err != nil {
		return err
	}
	d.mtu = mtu
	pc := pathConfig{log: d.log, m: d.m, events: d.events, masq: d.cfg.IPMasq, offload: d.cfg.TxChecksumOffload, mtu: mtu,
		hooks: pathHooks{unreachable: d.unreachableChanged, transport: d.transportCounted, pathMTU: d.pathMTUCounted}}
	var wgs []wgDevice
	for _, b := range bs {
		fp := newFamilyPath(b, planes[b.Family()], pc)
		d.paths = append(d.paths, fp)
		// In single-tunnel modes both families name one device: it is counted once.
		if dev, r := fp.WireGuard(); dev != nil && !slices.ContainsFunc(wgs, func(w wgDevice) bool { return w.name == dev.Name }) {
			wgs = append(wgs, wgDevice{name: dev.Name, runner: r})
		}
	}
	d.m.wireguard.devices.Store(&wgs)
	d.health.update(func(h *health) {
		h.status.Interface, h.status.Backend = d.ext.Name, d.net.Backend.Type
		if d.ext.Addr.IsValid() {
			h.status.Address, h.status.PublicIP = d.ext.Addr.String(), d.ext.PublicIP.String()
		}
		if d.ext.Addr6.IsValid() {
			h.status.Address6, h.status.PublicIPv6 = d.ext.Addr6.String(), d.ext.PublicIPv6.String()
		}
	})

	if !d.cfg.KubeSubnetMgr {
		path := subnet.NodeIDFile(d.cfg.SubnetFile)
		var made bool
		if d.nodeID, made, err = subnet.LoadNodeID(path); err != nil {
			return err
		}
		if made {
			d.log.Info("made a node identity", "id", d.nodeID, "path", path)
		}
	}
	// The devices are made for the subnets the acquisition picks (HNS needs it; on Linux it
	// is the same step), and their MACs published with that one acquisition.
	req := subnet.AcquireRequest{Attrs: d.attrs(nil)}
	req.Prepare = func(ctx context.Context, sn, sn6 netip.Prefix, held subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
		// A Prepare that fails may have made its device first (on Windows the HNS network,
		// whose every re-creation blinks the host's NIC): the acquisition's retry asks for
		// these subnets again, so that the next Prepare finds that device and keeps it.
		req.Previous, req.PreviousIPv6 = sn, sn6
		macs := make([]backend.MAC, len(d.paths))
		for i, fp := range d.paths {
			mac, err := fp.Prepare(ctx, sn, sn6, held)
			if err != nil {
				d.events.Dataplane(err)
				return subnet.LeaseAttrs{}, err
			}
			macs[i] = mac
		}
		d.wireGuardStatus()
		return d.attrs(macs), nil
	}
	switch env, err := subnet.ReadEnv(d.cfg.SubnetFile); {
	case err == nil:
		req.Previous, req.PreviousIPv6 = env.LeaseSubnets()
	case !errors.Is(err, fs.ErrNotExist):
		d.log.Warn("ignoring unreadable subnet file", "path", d.cfg.SubnetFile, "err", err)
	}
	if !req.Previous.IsValid() && !req.PreviousIPv6.IsValid() {
		req.Previous, req.PreviousIPv6 = d.held()
	}
	defer func() { d.subnets.Store(&[2]netip.Prefix{d.own.Subnet, d.own.IPv6Subnet}) }()
	if d.own, err = d.acquire(ctx, &req); err != nil {
		return err
	}
	for _, fp := range d.paths {
		fp.Start(ctx, d.own)
	}
	d.publish()
	d.leaseChanged()
	return d.writeEnv()
}

// held is the subnets the families' devices serve already (backend.SubnetKeeper), for a node
// without subnet.env.
func (d *daemon) held() (sn, sn6 netip.Prefix) {
	for _, fp := range d.paths {
		a, b := fp.Held()
		if a.IsValid() && d.net.EnableIPv4 {
			sn = a
		}
		if b.IsValid() && d.net.EnableIPv6 {
			sn6 = b
		}
	}
	if sn.IsValid() || sn6.IsValid() {
		d.log.Info("no subnet file: asking for the subnets the data plane's device serves", "subnet", sn, "ipv6_subnet", sn6)
	}
	return sn, sn6
}

// attrs are the lease attributes the node publishes: each family's half, from its backend and
// the VTEP MAC of its device in macs (by path; nil: zero MACs).
func (d *daemon) attrs(macs []backend.MAC) subnet.LeaseAttrs {
	a := subnet.LeaseAttrs{NodeID: d.nodeID}
	for i, fp := range d.paths {
		var mac backend.MAC
		if macs != nil {
			mac = macs[i]
		}
		fp.AddAttrs(&a, mac)
	}
	return a
}

// waitConfig reads the network config, waiting while there is none or etcd cannot be
// reached; a config that is there but wrong ends start-up.
func (d *daemon) waitConfig(ctx context.Context) (*subnet.Config, error) {
	return retry(ctx, d.log, "read network config", func() (*subnet.Config, bool, error) {
		cfg, err := timed(d, "get_config", func() (*subnet.Config, error) {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return d.sm.GetConfig(rctx)
		})
		var ce *subnet.ConfigError
		if errors.As(err, &ce) {
			return nil, true, err
		}
		if err == nil {
			if err = d.caps.Check(cfg); err != nil {
				return nil, true, err
			}
		}
		return cfg, false, err
	})
}

// acquire acquires the lease, retrying; each attempt sends req as it is then (its Prepare
// changes its Previous subnets).
func (d *daemon) acquire(ctx context.Context, req *subnet.AcquireRequest) (subnet.Lease, error) {
	l, err := retry(ctx, d.log, "acquire lease", func() (subnet.Lease, bool, error) {
		l, err := timed(d, "acquire", func() (subnet.Lease, error) {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return d.sm.Acquire(rctx, *req)
		})
		// A config error (a podCIDR that does not fit the network) will not go away by itself.
		var ce *subnet.ConfigError
		return l, errors.As(err, &ce), err
	})
	if err == nil {
		d.log.Info("lease acquired", "subnet", l.Subnet, "ipv6_subnet", l.IPv6Subnet, "expires", l.Expiration)
		d.events.LeaseAcquired(l)
	}
	return l, err
}

// startupGCPercent is the GOGC of the cold start: the heap grows by a quarter of what is live
// before a collection, not by all of it. At 20,000 peers (make bench, etcd mode) 25 peaks at
// 58 MiB, 1.47 to 1.49 times the settled RSS, where 50 peaked at 65 to 66 MiB (1.57 to 1.64
// times, once the Set and the probes had shrunk); it costs 0.1 to 0.25 s of the 1.0 to 1.3 s
// to all routes.
const startupGCPercent = 25

// startupTail is how long the start-up's GOGC stays after the first convergence, before its
// garbage goes back to the OS: the drift watch, started then, first dumps and compares
// everything that convergence wrote (80,000 entries at 20,000 peers).
const startupTail = 2 * time.Second

// requestTimeout bounds one call of the datastore (an acquisition may take several round
// trips, a wait for the podCIDR and, on Windows, the HNS network's creation), so that none is
// waited on forever. The managers bound each round trip much shorter (etcd.Options'
// RequestTimeout, ListTimeout; kube's requestTimeout): a request that hangs fails within
// seconds and is retried.
const requestTimeout = 2 * time.Minute

// timed runs one datastore request, recording its latency and counting its failure.
func timed[T any](d *daemon, op string, f func() (T, error)) (T, error) {
	start := time.Now()
	v, err := f()
	d.m.datastoreLatency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	switch op {
	case "acquire":
		d.m.acquisitions.WithLabelValues(result(err)).Inc()
	}
	if err != nil {
		d.m.errors.WithLabelValues(op).Inc()
	}
	return v, err
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "success"
}

// retry calls f until it succeeds, says its error is final, or ctx ends; it logs failures
// and waits retryWait between tries.
func retry[T any](ctx context.Context, log *slog.Logger, what string, f func() (T, bool, error)) (T, error) {
	for n := 0; ; n++ {
		v, final, err := f()
		if err == nil || final {
			return v, err
		}
		wait := retryWait(n)
		log.Warn(what+" failed, retrying", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// maxRetryWait bounds retry's wait: a node started while its datastore is down gets its
// lease at most this long after the datastore is back (it was 30 s, and the soak saw a node
// start 16 s after an API server outage ended). Only starting nodes retry so, with one
// request a try: the kubelet's heartbeats ask more of an API server.
const maxRetryWait = 5 * time.Second

// retryWait is the wait after the n-th failed try (from 0): a second, doubling up to
// maxRetryWait.
func retryWait(n int) time.Duration {
	if n >= 3 {
		return maxRetryWait
	}
	return min(time.Second<<n, maxRetryWait)
}

func (d *daemon) writeEnv() error {
	env := Env(d.net, d.own, d.mtu, d.cfg.IPMasq)
	if err := subnet.WriteEnv(d.cfg.SubnetFile, env); err != nil {
		d.m.errors.WithLabelValues("write_subnet_env").Inc()
		return fmt.Errorf("write %s: %w", d.cfg.SubnetFile, err)
	}
	d.health.update(func(h *health) { h.envWritten = true })
	return nil
}

// leaseChanged publishes the own lease to metrics and status.
func (d *daemon) leaseChanged() {
	d.m.leaseInfo.Reset()
	sn, ip := d.own.Subnet, d.own.Attrs.PublicIP
	if !sn.IsValid() { // IPv6 only
		sn, ip = d.own.IPv6Subnet, d.own.Attrs.PublicIPv6
	}
	d.m.leaseInfo.WithLabelValues(sn.String(), ip.String(), d.own.Attrs.BackendType).Set(1)
	exp := 0.0
	if !d.own.Expiration.IsZero() {
		exp = float64(d.own.Expiration.Unix())
	}
	d.m.leaseExpiry.Set(exp)
	d.health.update(func(h *health) {
		h.expiration = d.own.Expiration
		ls := &status.Lease{BackendData: d.own.Attrs.BackendData}
		if d.own.Subnet.IsValid() {
			ls.Subnet = d.own.Subnet.String()
		}
		if d.own.IPv6Subnet.IsValid() {
			ls.IPv6Subnet = d.own.IPv6Subnet.String()
		}
		if !d.own.Expiration.IsZero() {
			exp := d.own.Expiration
			ls.Expiration = &exp
		}
		h.status.Lease = ls
	})
}

// loop keeps the data plane converged until ctx is done. The goroutines it starts are
// counted in wg.
func (d *daemon) loop(ctx context.Context, wg *sync.WaitGroup) error {
	events := make(chan subnet.Batch, 16)
	watchDone := make(chan error, 1)
	wg.Go(func() { watchDone <- d.sm.Watch(ctx, events) })
	d.toRenew, d.renewed = make(chan subnet.Lease, 1), make(chan renewal, 1)
	wg.Go(func() { d.renewer(ctx) })
	drift := make(chan struct{}, 1)
	// The drift watch starts once the first convergence is over, not before it: at start-up
	// that convergence writes an entry per peer and kind (80,000 at 20,000 peers), and a
	// subscription open meanwhile has the kernel copy each write's notification to it and
	// weftd parse each one as an echo, which at 20,000 peers (make bench) doubled the time
	// to all routes. A watch compares the kernel with the model as soon as it is subscribed
	// (Plane.Watch), so what changed before it started is restored all the same.
	watchingDrift := false
	watchDrift := func() {
		watchingDrift = true
		for _, fp := range d.paths {
			wg.Go(func() {
				err := fp.Watch(ctx, func() {
					select {
					case drift <- struct{}{}:
					default:
					}
				})
				if err != nil && ctx.Err() == nil {
					d.log.Warn("watching the data plane for drift stopped; relying on the periodic resync", "family", fp.fam(), "err", err)
				}
			})
		}
	}

	resync := time.NewTicker(d.cfg.ResyncInterval)
	defer resync.Stop()
	renew := time.NewTimer(d.renewIn())
	defer renew.Stop()
	retryConverge := time.NewTimer(time.Hour)
	retryConverge.Stop()
	// Start-up is a burst that steady state never repeats: every lease listed and parsed, the
	// kernel dumped, thousands of entries written and as many notifications of them read
	// back. Its garbage goes back to the OS once that is over, rather than over minutes.
	startupGarbage := time.NewTicker(time.Second)
	defer startupGarbage.Stop()
	for {
		d.health.update(func(h *health) { h.lastBeat = time.Now() })
		select {
		case <-ctx.Done():
			d.log.Info("stopping; the data plane stays as it is")
			_ = sdNotify(d.cfg.NotifySocket, "STOPPING=1")
			return nil
		case err := <-watchDone:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("lease watch ended: %w", err)
		case batch := <-events:
			d.take(batch)
			// Coalesce: a burst of events is one convergence.
			for drained := false; !drained; {
				select {
				case more := <-events:
					d.take(more)
				default:
					drained = true
				}
			}
		case <-drift:
			for _, fp := range d.paths {
				fp.Drifted()
			}
		case <-resync.C:
			d.resync()
		case <-startupGarbage.C:
			if !d.startupDone.IsZero() && time.Since(d.startupDone) >= startupTail {
				debug.SetGCPercent(d.gcPercent)
				debug.FreeOSMemory()
				startupGarbage.Stop()
				d.steady = true
			}
		case <-retryConverge.C:
			d.resync()
		case <-renew.C:
			d.startRenew()
		case r := <-d.renewed:
			d.renewing = false
			d.finishRenew(r)
			renew.Reset(d.renewIn())
		}
		if d.synced {
			d.healMACs(ctx)
		}
		inStore := d.inStore && d.stored.Equal(d.own.Attrs)
		d.health.update(func(h *health) { h.synced, h.ownInStore = d.synced, inStore })
		if wait := ownRenewGap - time.Since(d.lastRenew); d.synced && !inStore && wait < 0 {
			// Our lease is gone or was overwritten: get it back now, not at renewal time.
			if !d.renewing {
				d.log.Warn("own lease missing or changed in the datastore, renewing", "lease", d.own.Key())
			}
			d.startRenew()
		} else if d.synced && !inStore && !d.renewing {
			// Overwritten again just after a renewal: the loop may hear nothing more, so
			// the renewal timer wakes it when the gap is over.
			renew.Reset(wait)
		}
		if d.synced && slices.ContainsFunc(d.paths, (*familyPath).Busy) {
			err := d.converge(ctx)
			if err != nil {
				d.log.Error("converging the data plane failed; retrying", "err", err)
				retryConverge.Reset(time.Second)
			}
			d.events.Dataplane(err)
			if !watchingDrift {
				watchDrift()
			}
		}
		if d.viewStale && d.synced {
			// After the convergence, so that a peer the view shows is one the data plane
			// was given, and copying the sets delays no event. Not for the partial batches
			// of a streamed listing: nothing is applied before its end, and a copy of the
			// growing sets after each would cost the start what it saved.
			d.publish()
		}
	}
}

// resync makes the next Apply of every family a full one.
func (d *daemon) resync() {
	for _, fp := range d.paths {
		fp.Resync()
	}
}

// seenAt is a batch of lease events that changed keys not pending before: when it came,
// and how many.
type seenAt struct {
	at   time.Time
	keys int
}

// take folds a batch of lease events into every family's peer set. The node is synced from
// the first whole batch on: partial ones (a listing streamed) fill the sets meanwhile, and no
// convergence may take what they hold for every lease.
func (d *daemon) take(b subnet.Batch) {
	batch := b.Events
	d.synced = d.synced || !b.Partial
	now := time.Now()
	d.viewStale = true
	fresh := 0
	for _, ev := range batch {
		k := ev.LeaseKey()
		d.m.eventsReceived.WithLabelValues(ev.Type.String()).Inc()
		if k == d.own.Key() {
			d.inStore, d.stored = ev.Type == subnet.EventAdded, ev.Lease.Attrs
			continue
		}
		if _, seen := d.pending[k]; !seen {
			d.pending[k] = struct{}{}
			fresh++
		}
	}
	if fresh > 0 {
		d.pendingSince = append(d.pendingSince, seenAt{at: now, keys: fresh})
	}
	for _, fp := range d.paths {
		d.noteSkipped(fp.Observe(batch))
	}
	d.noteContested()
}

// noteContested publishes how many older peer leases claim the own lease's subnet, public IP
// or VTEP MAC (in any family): a gauge and the readiness reason.
func (d *daemon) noteContested() {
	n := 0
	for _, fp := range d.paths {
		n += fp.Contesting()
	}
	d.m.contested.Set(float64(n))
	d.health.update(func(h *health) { h.contested = n })
}

// noteSkipped logs, counts and tells the leases newly skipped.
func (d *daemon) noteSkipped(skipped []backend.Skipped) {
	for _, s := range skipped {
		d.m.skipped.WithLabelValues(s.Code).Inc()
		d.events.PeerSkipped(s.Code, s.Key)
		if s.Contests && s.Code == backend.SkipDuplicateMAC && d.changesMAC(s.Family) {
			d.log.Warn("a lease that comes first claims this node's VTEP MAC: this node is the newcomer (its device made again with a MAC someone else wrote into its lease, a cloned VM?); it takes a new MAC",
				"lease", s.Key, "family", s.Family, "reason", s.Reason)
			continue
		}
		if s.Contests {
			d.log.Error("an older lease claims what this node's lease claims: this node is the newcomer (a cloned VM, a copied config?); it keeps its claim, the other nodes program the older lease",
				"lease", s.Key, "family", s.Family, "reason", s.Reason)
			continue
		}
		d.log.Warn("skipping peer lease", "lease", s.Key, "family", s.Family, "reason", s.Reason)
	}
}

func (d *daemon) renewIn() time.Duration {
	if d.own.Expiration.IsZero() {
		return time.Hour // a reservation: nothing to renew, but look again now and then
	}
	return max(time.Until(d.own.Expiration)-d.cfg.RenewMargin, time.Second)
}

// ownRenewGap is the least time between two renewals the loop starts because the own lease
// is missing or changed in the datastore: a writer that fights the node's over its lease
// costs a request every few seconds, not a storm.
const ownRenewGap = 5 * time.Second

// renewal is what one renewal of the own lease asked and got.
type renewal struct {
	asked subnet.Lease
	got   subnet.Lease
	err   error
}

// renewer renews the own lease each time the loop asks, until ctx is done.
func (d *daemon) renewer(ctx context.Context) {
	for {
		var own subnet.Lease
		select {
		case <-ctx.Done():
			return
		case own = <-d.toRenew:
		}
		l, err := timed(d, "renew", func() (subnet.Lease, error) {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return d.sm.Renew(rctx, own)
		})
		select {
		case <-ctx.Done():
			return
		case d.renewed <- renewal{asked: own, got: l, err: err}:
		}
	}
}

// startRenew has the own lease renewed, publishing d.own's attributes, unless a renewal is
// under way; the loop takes its result (finishRenew) when it comes.
func (d *daemon) startRenew() {
	if d.renewing {
		return
	}
	d.renewing, d.lastRenew = true, time.Now()
	d.toRenew <- d.own
}

// finishRenew takes a renewal's result: the own lease, and a change of the subnet followed.
func (d *daemon) finishRenew(r renewal) {
	if r.err != nil {
		d.m.renewals.WithLabelValues("error").Inc()
		d.log.Error("renewing the lease failed", "lease", r.asked.Key(), "err", r.err)
		return
	}
	l := r.got
	// The device was made again meanwhile (recreateDevice): the renewal published the
	// attributes of the old one. The lease is kept with the new ones, which the next renewal,
	// asked now, publishes.
	stale := !r.asked.Attrs.Equal(d.own.Attrs)
	if stale {
		l.Attrs = d.own.Attrs
	}
	changed := !l.SameSubnets(d.own)
	if changed {
		d.m.renewals.WithLabelValues("changed").Inc()
		d.log.Error("own subnet changed: pods on the old subnet lose connectivity until they restart", "old", d.own.Key(), "new", l.Key())
	} else {
		d.m.renewals.WithLabelValues("success").Inc()
	}
	d.setOwn(l)
	if changed {
		if err := d.writeEnv(); err != nil {
			d.log.Error("rewriting subnet.env", "err", err)
		}
	}
	if stale {
		d.startRenew()
	}
}

// setOwn makes l the own lease: every peer is weighed against it again.
func (d *daemon) setOwn(l subnet.Lease) {
	if !l.SameSubnets(d.own) || !l.Attrs.Equal(d.own.Attrs) {
		d.events.LeaseChanged(d.own, l)
	}
	if !l.SameSubnets(d.own) || !l.Attrs.Equal(d.own.Attrs) || l.Created != d.own.Created { // not just a new expiry
		d.viewStale = true
		for _, fp := range d.paths {
			d.noteSkipped(fp.OwnChanged(l))
		}
		d.noteContested()
	}
	d.own = l
	d.subnets.Store(&[2]netip.Prefix{l.Subnet, l.IPv6Subnet})
	d.leaseChanged()
}

// converge applies what changed since the last convergence: the changed peers only, or
// everything (dump and diff) after a drift, a failure, at the resync and at start.
func (d *daemon) converge(ctx context.Context) error {
	if d.steady && slices.ContainsFunc(d.paths, (*familyPath).Full) {
		defer d.leanFull()()
	}
	start := time.Now()
	var changes backend.Changes
	var errs []error
	full, peers := false, 0
	for _, fp := range d.paths {
		if !fp.Busy() {
			continue
		}
		full = full || fp.Full()
		c, err := d.apply(ctx, fp)
		changes = changes.Add(c)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", fp.fam(), err))
		}
	}
	for _, fp := range d.paths {
		peers = max(peers, fp.Peers())
	}
	err := errors.Join(errs...)
	took := time.Since(start)
	d.m.convergeDuration.Observe(took.Seconds())
	for kind, n := range changes {
		d.m.changes.WithLabelValues(kind).Add(float64(n))
		if len(d.pending) == 0 {
			// Nothing changed in the datastore: whatever had to be written was drift.
			d.m.driftRestored.WithLabelValues(kind).Add(float64(n))
		}
	}
	if err == nil && d.viewStale {
		// Before readiness is set: a reader that sees /readyz succeed and then reads
		// /status finds the peers the data plane was given, not those of before.
		d.publish()
	}
	d.health.update(func(h *health) {
		h.lastErr = err
		if err == nil {
			h.everConverged = true
		}
		last := &status.Converge{Time: start, Duration: took.String(), Changes: changes.String()}
		if err != nil {
			last.Error = err.Error()
		}
		h.status.Last = last
	})
	if err != nil {
		d.m.errors.WithLabelValues("converge").Inc()
		return err
	}
	now := time.Now()
	for _, b := range d.pendingSince {
		for range b.keys {
			d.m.programDelay.Observe(now.Sub(b.at).Seconds())
		}
	}
	d.pendingSince = d.pendingSince[:0]
	d.m.eventsApplied.Add(float64(len(d.pending)))
	if len(d.pending) > 64 {
		d.pending = map[string]struct{}{} // clear would keep the room of a start-up's thousands
	} else {
		clear(d.pending)
	}
	if !d.notified {
		d.notified = true
		d.startupDone = time.Now()
		status := fmt.Sprintf("STATUS=lease %s, %d peers", d.own.Key(), peers)
		if err := sdNotify(d.cfg.NotifySocket, "READY=1\n"+status); err != nil {
			d.log.Warn("telling systemd weftd is ready", "err", err)
		}
	}
	if !d.ready && d.cfg.SetNodeNetworkUnavailable {
		d.ready = setReady(ctx, d.sm, d.log)
	}
	if changes.Total() > 0 {
		d.log.Info("data plane converged", "changes", changes.String(), "full", full, "peers", peers, "took", took)
	}
	return nil
}

// leanFull lowers GOGC to the start-up's (startupGCPercent) for a full convergence after
// the start-up, and returns what restores it and gives the convergence's garbage back to the
// OS. A full Apply dumps every entry the kernel holds to compare it (80,000 at 20,000 peers):
// at GOGC 100 the periodic resync took a node of 20,000 peers (make bench, read 40 s after
// its start) from 39 MiB RSS to 71 to 80 MiB, and left it there.
func (d *daemon) leanFull() func() {
	prev := debug.SetGCPercent(min(d.gcPercent, startupGCPercent))
	return func() {
		debug.SetGCPercent(prev)
		debug.FreeOSMemory()
	}
}

// apply applies what is pending for one family; an overlay device found gone is made again
// (recreateDevice) and everything applied to it.
func (d *daemon) apply(ctx context.Context, fp *familyPath) (backend.Changes, error) {
	changes, err := fp.Apply(ctx)
	if missing := new(backend.MissingDeviceError); errors.As(err, &missing) {
		d.log.Warn("overlay device gone, creating it again", "device", missing.Name)
		if err = d.recreateDevice(ctx, fp); err == nil {
			var more backend.Changes
			more, err = fp.Apply(ctx) // a full one: the device is new
			changes = changes.Add(more)
		}
	}
	return changes, err
}

// wireGuardStatus puts the WireGuard devices, and which WireGuard runs each, in /status.
func (d *daemon) wireGuardStatus() {
	var wgs []status.WireGuard
	for _, fp := range d.paths {
		dev, r := fp.WireGuard()
		if dev == nil || slices.ContainsFunc(wgs, func(w status.WireGuard) bool { return w.Device == dev.Name }) {
			continue // single-tunnel modes: both families' device, shown once
		}
		wgs = append(wgs, status.WireGuard{Device: dev.Name, ListenPort: int(dev.ListenPort),
			PublicKey: dev.PrivateKey.PublicKey().String(), Implementation: r.Implementation(dev.Name)})
	}
	if wgs != nil {
		d.health.update(func(h *health) { h.status.WireGuard = wgs })
	}
}

// recreateDevice brings back a family's overlay device deleted under the daemon, with the
// VTEP MAC the lease publishes: the peers, which know it, reach the node again as soon as
// the device is back, without a datastore to learn a new one from. Should the plane give it
// another MAC all the same, the lease is published again with it.
func (d *daemon) recreateDevice(ctx context.Context, fp *familyPath) error {
	mac, err := fp.Remake(ctx, d.own.Attrs)
	if err != nil {
		return err
	}
	d.wireGuardStatus()
	d.publishMAC(fp, mac)
	return nil
}

// healMACs gives a family's overlay device a new VTEP MAC when a peer lease that comes first
// claims the one the node publishes (familyPath.HealMAC), and publishes it: the peers then
// program the node again, and the other lease too.
func (d *daemon) healMACs(ctx context.Context) {
	for _, fp := range d.paths {
		mac, changed, err := fp.HealMAC(ctx, time.Now())
		if err != nil {
			d.log.Error("giving the overlay device a new VTEP MAC failed", "family", fp.fam(), "err", err)
			continue
		}
		if changed {
			d.log.Warn("gave the overlay device a new VTEP MAC, which the lease publishes: a peer lease that comes first claimed the one before, so every node skipped this one",
				"family", fp.fam(), "mac", mac)
			d.publishMAC(fp, mac)
		}
	}
}

// changesMAC reports whether the family's plane gives its device a new VTEP MAC when a lease
// that comes first claims the node's (familyPath.HealMAC).
func (d *daemon) changesMAC(fam backend.Family) bool {
	i := slices.IndexFunc(d.paths, func(fp *familyPath) bool { return fp.fam() == fam })
	return i >= 0 && d.paths[i].ChangesMAC()
}

// publishMAC makes mac the family's VTEP MAC in the own lease, and has the lease published,
// unless it is so already.
func (d *daemon) publishMAC(fp *familyPath, mac backend.MAC) {
	attrs := d.own.Attrs
	fp.AddAttrs(&attrs, mac)
	if !attrs.Equal(d.own.Attrs) {
		l := d.own
		l.Attrs = attrs
		d.setOwn(l)
		d.startRenew() // Renew sees attributes differing from the stored ones and publishes ours
	}
}
