package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/weftnet/weft/netif"
	"io/fs"
	"log/slog"
	"maps"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/backend/hostgw"
	"github.com/weftnet/weft/backend/vxlan"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// Plane is the data plane of the OS: it makes the system match a backend.State.
type Plane interface {
	// EnsureVXLAN creates or adopts the overlay device and returns its MAC.
	EnsureVXLAN(dev backend.VXLANDevice) (backend.MAC, error)
	// Reconcile converges the system to st, removing only entries owned says are the
	// daemon's, and counts what it wrote. A *backend.MissingDeviceError means the overlay
	// device is gone and EnsureVXLAN must run again.
	Reconcile(st backend.State, owned backend.Ownership) (backend.Changes, error)
	// Masquerade makes pod traffic leaving the network masqueraded (--ip-masq).
	Masquerade(network, own netip.Prefix) (changed bool, err error)
	// Watch calls changed when the system's routes, neighbours or links change.
	Watch(ctx context.Context, changed func()) error
	Close()
}

// Deps are what Run works with; tests put their own in.
type Deps struct {
	Manager    subnet.Manager
	Plane      Plane
	Interfaces func() ([]netif.Interface, error)
	DefaultIf  func() (string, error)
	metrics    *metrics // made by RunWith when nil
}

// Run runs weftd until ctx is done. It returns an error only when it cannot go on: a bad
// config, no usable interface, a data plane that cannot be set up.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	m := newMetrics()
	var sm subnet.Manager
	if cfg.KubeSubnetMgr {
		km, err := newKubeManager(ctx, cfg.KubeConfig, &cfg.PublicIP, log, m)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		sm = km
	} else {
		cli, err := etcd.NewClient(etcd.ClientConfig{
			Endpoints: cfg.EtcdEndpoints, CAFile: cfg.EtcdCAFile, CertFile: cfg.EtcdCertFile, KeyFile: cfg.EtcdKeyFile,
			Username: cfg.EtcdUsername, Password: cfg.EtcdPassword,
		})
		if err != nil {
			return err
		}
		defer cli.Close()
		sm = etcd.New(cli, etcd.Options{
			Prefix:         cfg.EtcdPrefix,
			Logger:         log,
			OnSkip:         func(string, error) { m.skipped.WithLabelValues(backend.SkipMalformed).Inc() },
			OnWatchRestart: func(error) { m.watchRestarts.Inc() },
			OnRelist:       m.watchRelists.Inc,
		})
	}
	plane, err := newPlane(log)
	if err != nil {
		return fmt.Errorf("data plane: %w", err)
	}
	defer plane.Close()
	return RunWith(ctx, cfg, log, Deps{
		Manager:    sm,
		Plane:      plane,
		Interfaces: netif.List,
		DefaultIf:  defaultRouteInterface,
		metrics:    m,
	})
}

// RunWith is Run on the given dependencies.
func RunWith(ctx context.Context, cfg Config, log *slog.Logger, deps Deps) error {
	if deps.metrics == nil {
		deps.metrics = newMetrics()
	}
	d := &daemon{cfg: cfg, log: log, sm: deps.Manager, plane: deps.Plane, m: deps.metrics,
		skipped: map[string]backend.Skipped{}, pending: map[string]time.Time{}}
	var check func() error
	if c, ok := deps.Manager.(subnet.Checker); ok {
		check = c.Check
	}
	d.health = newHealth(cfg, d.m, check)
	go d.health.watchDatastore(ctx)
	if cfg.HealthzPort != 0 {
		stop, err := d.health.serve(netip.AddrPortFrom(netip.MustParseAddr(cfg.HealthzIP), uint16(cfg.HealthzPort)), log)
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
	return d.loop(ctx)
}

type daemon struct {
	cfg    Config
	log    *slog.Logger
	sm     subnet.Manager
	plane  Plane
	health *health
	m      *metrics

	net     *subnet.Config
	ext     netif.External
	attrs   subnet.LeaseAttrs
	own     subnet.Lease
	mtu     int
	desired func(own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped)

	peers     map[string]subnet.Lease    // by lease key, own included
	skipped   map[string]backend.Skipped // by lease key, to log and count each once
	pending   map[string]time.Time       // lease keys changed since the last convergence: when first seen
	synced    bool                       // the first watch batch arrived
	lastRenew time.Time
	notified  bool // systemd was told weftd is ready
	ready     bool // the datastore was told the node's network works (Kubernetes: NetworkUnavailable=False)
}

// setUp does everything before the loop: config, interface, device, lease, subnet.env.
func (d *daemon) setUp(ctx context.Context, deps Deps) error {
	var err error
	if d.net, err = d.waitConfig(ctx); err != nil {
		return err
	}
	ifs, err := deps.Interfaces()
	if err != nil {
		return err
	}
	if d.ext, err = netif.Pick(netif.Choice{Ifaces: d.cfg.Ifaces, Regexps: d.cfg.IfaceRegexs, PublicIP: d.cfg.PublicIP}, ifs, deps.DefaultIf); err != nil {
		return err
	}
	d.log.Info("using interface", "iface", d.ext.Name, "addr", d.ext.Addr, "public_ip", d.ext.PublicIP, "mtu", d.ext.MTU)

	d.attrs = subnet.LeaseAttrs{PublicIP: d.ext.PublicIP, BackendType: d.net.Backend.Type}
	preparer, prepares := d.plane.(leasePreparer)
	var prepare func(context.Context, netip.Prefix, netip.Prefix) (subnet.LeaseAttrs, error)
	switch d.net.Backend.Type {
	case subnet.BackendVXLAN:
		node := vxlan.Node{Config: d.net, VNI: d.net.Backend.VNIFor(runtime.GOOS), Local: d.ext.Addr,
			Underlay: d.ext.Name, UnderlayMTU: d.ext.MTU, Connected: d.ext.Connected}
		if node.MTU() < 68 {
			return fmt.Errorf("interface %s: MTU %d leaves no room for VXLAN's %d bytes", d.ext.Name, d.ext.MTU, vxlan.Overhead)
		}
		if dev := node.Device(); prepares {
			// The device is made for the subnet the acquisition picks; its MAC is published
			// with that one acquisition.
			prepare = preparer.prepare(d.cfg, d.net, d.ext, &dev, d.attrs)
		} else {
			mac, err := d.plane.EnsureVXLAN(dev)
			if err != nil {
				return fmt.Errorf("overlay device %s: %w", dev.Name, err)
			}
			d.attrs.BackendData = vxlan.Data{VNI: node.VNI, VtepMAC: mac}.Encode()
		}
		d.mtu = node.MTU()
		d.desired = func(own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped) {
			return vxlan.Desired(node, own, peers)
		}
	case subnet.BackendHostGW:
		if d.ext.PublicIP != d.ext.Addr {
			return fmt.Errorf("--public-ip=%s differs from %s's address %s: host-gw routes to peers by their public IPs, which must be on the interface", d.ext.PublicIP, d.ext.Name, d.ext.Addr)
		}
		node := hostgw.Node{Config: d.net, Underlay: d.ext.Name, Connected: d.ext.Connected}
		d.mtu = d.ext.MTU
		d.desired = func(own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped) {
			return hostgw.Desired(node, own, peers)
		}
		if prepares {
			prepare = preparer.prepare(d.cfg, d.net, d.ext, nil, d.attrs)
		}
	}
	d.health.update(func(h *health) {
		h.status.Interface, h.status.Address, h.status.PublicIP = d.ext.Name, d.ext.Addr.String(), d.ext.PublicIP.String()
		h.status.Backend = d.net.Backend.Type
	})

	req := subnet.AcquireRequest{Attrs: d.attrs, Prepare: prepare}
	switch env, err := subnet.ReadEnv(d.cfg.SubnetFile); {
	case err == nil:
		req.Previous, req.PreviousIPv6 = env.LeaseSubnets()
	case !errors.Is(err, fs.ErrNotExist):
		d.log.Warn("ignoring unreadable subnet file", "path", d.cfg.SubnetFile, "err", err)
	}
	if d.own, err = d.acquire(ctx, req); err != nil {
		return err
	}
	d.attrs = d.own.Attrs // as published: with Prepare, they carry the device's MAC
	d.leaseChanged()
	return d.writeEnv()
}

// leasePreparer is a data plane that can make its device only for a known subnet (HNS):
// instead of EnsureVXLAN before the lease, it gives the acquisition a Prepare function that
// makes the device for the chosen subnet and returns the attributes to publish. dev is nil
// for host-gw.
type leasePreparer interface {
	prepare(cfg Config, net *subnet.Config, ext netif.External, dev *backend.VXLANDevice, attrs subnet.LeaseAttrs) func(context.Context, netip.Prefix, netip.Prefix) (subnet.LeaseAttrs, error)
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
			if err = cfg.CheckFor(runtime.GOOS); err != nil {
				return nil, true, err
			}
			if cfg.EnableIPv6 {
				return nil, true, &subnet.ConfigError{Key: "EnableIPv6", Value: "true", Reason: "IPv6 is not supported by weftd yet"}
			}
		}
		return cfg, false, err
	})
}

func (d *daemon) acquire(ctx context.Context, req subnet.AcquireRequest) (subnet.Lease, error) {
	l, err := retry(ctx, d.log, "acquire lease", func() (subnet.Lease, bool, error) {
		l, err := timed(d, "acquire", func() (subnet.Lease, error) {
			rctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			return d.sm.Acquire(rctx, req)
		})
		// A config error (a podCIDR that does not fit the network) will not go away by itself.
		var ce *subnet.ConfigError
		return l, errors.As(err, &ce), err
	})
	if err == nil {
		d.log.Info("lease acquired", "subnet", l.Subnet, "expires", l.Expiration)
	}
	return l, err
}

// requestTimeout bounds one datastore request (an acquisition may take several round trips
// and, on Windows, the HNS network's creation), so that a hung connection is retried rather
// than waited on forever.
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
// and backs off up to half a minute.
func retry[T any](ctx context.Context, log *slog.Logger, what string, f func() (T, bool, error)) (T, error) {
	backoff := time.Second
	for {
		v, final, err := f()
		if err == nil || final {
			return v, err
		}
		log.Warn(what+" failed, retrying", "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (d *daemon) writeEnv() error {
	env := subnet.NewEnv(d.net.Network, d.own.Subnet, netip.Prefix{}, netip.Prefix{}, d.mtu, d.cfg.IPMasq)
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
	d.m.leaseInfo.WithLabelValues(d.own.Subnet.String(), d.own.Attrs.PublicIP.String(), d.own.Attrs.BackendType).Set(1)
	exp := 0.0
	if !d.own.Expiration.IsZero() {
		exp = float64(d.own.Expiration.Unix())
	}
	d.m.leaseExpiry.Set(exp)
	d.health.update(func(h *health) {
		h.expiration = d.own.Expiration
		ls := &status.Lease{Subnet: d.own.Subnet.String(), BackendData: d.own.Attrs.BackendData}
		if !d.own.Expiration.IsZero() {
			exp := d.own.Expiration
			ls.Expiration = &exp
		}
		h.status.Lease = ls
	})
}

// loop keeps the data plane converged until ctx is done.
func (d *daemon) loop(ctx context.Context) error {
	events := make(chan []subnet.Event, 16)
	watchDone := make(chan error, 1)
	go func() { watchDone <- d.sm.Watch(ctx, events) }()
	drift := make(chan struct{}, 1)
	go func() {
		err := d.plane.Watch(ctx, func() {
			select {
			case drift <- struct{}{}:
			default:
			}
		})
		if err != nil && ctx.Err() == nil {
			d.log.Warn("watching the data plane for drift stopped; relying on the periodic resync", "err", err)
		}
	}()

	d.peers = map[string]subnet.Lease{}
	resync := time.NewTicker(d.cfg.ResyncInterval)
	defer resync.Stop()
	renew := time.NewTimer(d.renewIn())
	defer renew.Stop()
	retryConverge := time.NewTimer(time.Hour)
	retryConverge.Stop()
	dirty := false
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
			d.apply(batch)
			d.synced = true
			// Coalesce: a burst of events is one convergence.
			for drained := false; !drained; {
				select {
				case more := <-events:
					d.apply(more)
				default:
					drained = true
				}
			}
			dirty = true
		case <-drift:
			dirty = true
		case <-resync.C:
			dirty = true
		case <-retryConverge.C:
			dirty = true
		case <-renew.C:
			if d.renew(ctx) {
				dirty = true
			}
			renew.Reset(d.renewIn())
		}
		own, ok := d.peers[d.own.Key()]
		inStore := ok && own.Attrs.Equal(d.own.Attrs)
		d.health.update(func(h *health) { h.synced, h.ownInStore = d.synced, inStore })
		if d.synced && !inStore && time.Since(d.lastRenew) > 5*time.Second {
			// Our lease is gone or was overwritten: get it back now, not at renewal time.
			d.log.Warn("own lease missing or changed in the datastore, renewing", "lease", d.own.Key())
			if d.renew(ctx) {
				dirty = true
			}
			renew.Reset(d.renewIn())
		}
		if dirty && d.synced {
			if err := d.converge(ctx); err != nil {
				d.log.Error("converging the data plane failed; retrying", "err", err)
				retryConverge.Reset(time.Second)
			}
			dirty = false
		}
	}
}

// apply folds a batch of lease events into the peer set.
func (d *daemon) apply(batch []subnet.Event) {
	now := time.Now()
	for _, ev := range batch {
		k := ev.Lease.Key()
		d.m.eventsReceived.WithLabelValues(ev.Type.String()).Inc()
		if _, seen := d.pending[k]; !seen {
			d.pending[k] = now
		}
		switch ev.Type {
		case subnet.EventAdded:
			d.peers[k] = ev.Lease
		case subnet.EventRemoved:
			delete(d.peers, k)
		}
	}
}

func (d *daemon) renewIn() time.Duration {
	if d.own.Expiration.IsZero() {
		return time.Hour // a reservation: nothing to renew, but look again now and then
	}
	return max(time.Until(d.own.Expiration)-d.cfg.RenewMargin, time.Second)
}

// renew renews the own lease; it reports whether the lease changed in a way the data
// plane must follow.
func (d *daemon) renew(ctx context.Context) bool {
	d.lastRenew = time.Now()
	l, err := timed(d, "renew", func() (subnet.Lease, error) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return d.sm.Renew(rctx, d.own)
	})
	if err != nil {
		d.m.renewals.WithLabelValues("error").Inc()
		d.log.Error("renewing the lease failed", "lease", d.own.Key(), "err", err)
		return false
	}
	changed := !l.SameSubnets(d.own)
	if changed {
		d.m.renewals.WithLabelValues("changed").Inc()
		d.log.Error("own subnet changed: pods on the old subnet lose connectivity until they restart", "old", d.own.Subnet, "new", l.Subnet)
	} else {
		d.m.renewals.WithLabelValues("success").Inc()
	}
	d.own = l
	d.leaseChanged()
	if changed {
		if err := d.writeEnv(); err != nil {
			d.log.Error("rewriting subnet.env", "err", err)
		}
	}
	return changed
}

func (d *daemon) converge(ctx context.Context) error {
	peers := slices.Collect(maps.Values(d.peers))
	st, skipped := d.desired(d.own, peers)
	d.noteSkipped(skipped)
	start := time.Now()
	owned := backend.Ownership{
		Networks: []netip.Prefix{d.net.Network},
		Own:      []netip.Prefix{d.own.Subnet},
		Devices:  []string{d.ext.Name},
	}
	changes, err := d.plane.Reconcile(st, owned)
	if missing := new(backend.MissingDeviceError); st.VXLAN != nil && errors.As(err, &missing) {
		d.log.Warn("overlay device gone, creating it again", "device", missing.Name)
		if err = d.recreateDevice(ctx, *st.VXLAN); err == nil {
			var more backend.Changes
			more, err = d.plane.Reconcile(st, owned)
			maps.Copy(changes, more)
		}
	}
	if err == nil && d.cfg.IPMasq {
		var changed bool
		if changed, err = d.plane.Masquerade(d.net.Network, d.own.Subnet); changed {
			if changes == nil {
				changes = backend.Changes{}
			}
			changes["masquerade"]++
		}
	}
	took := time.Since(start)
	d.m.convergeDuration.Observe(took.Seconds())
	for kind, n := range changes {
		d.m.changes.WithLabelValues(kind).Add(float64(n))
		if len(d.pending) == 0 {
			// Nothing changed in the datastore: whatever had to be written was drift.
			d.m.driftRestored.WithLabelValues(kind).Add(float64(n))
		}
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
		h.status.Peers = d.peerStatus(peers, skipped)
	})
	if err != nil {
		d.m.errors.WithLabelValues("converge").Inc()
		return err
	}
	now := time.Now()
	for _, seen := range d.pending {
		d.m.programDelay.Observe(now.Sub(seen).Seconds())
	}
	d.m.eventsApplied.Add(float64(len(d.pending)))
	clear(d.pending)
	if !d.notified {
		d.notified = true
		status := fmt.Sprintf("STATUS=subnet %s, %d peers", d.own.Subnet, len(peers)-1)
		if err := sdNotify(d.cfg.NotifySocket, "READY=1\n"+status); err != nil {
			d.log.Warn("telling systemd weftd is ready", "err", err)
		}
	}
	if !d.ready {
		d.ready = setReady(ctx, d.sm, d.log)
	}
	if changes.Total() > 0 {
		d.log.Info("data plane converged", "changes", changes.String(), "peers", len(peers)-1, "took", took)
	}
	return nil
}

// peerStatus describes every peer for /status and the peer gauges.
func (d *daemon) peerStatus(peers []subnet.Lease, skipped []backend.Skipped) []status.Peer {
	why := map[string]string{}
	for _, s := range skipped {
		why[s.Key] = s.Reason
	}
	var out []status.Peer
	n := map[[2]string]int{}
	for _, l := range peers {
		if l.Key() == d.own.Key() {
			continue
		}
		ps := status.Peer{Key: l.Key(), Subnet: l.Subnet.String(), PublicIP: l.Attrs.PublicIP.String(),
			BackendType: l.Attrs.BackendType, BackendData: l.Attrs.BackendData, State: "programmed"}
		if r, ok := why[l.Key()]; ok {
			ps.State, ps.Reason = "skipped", r
		}
		n[[2]string{l.Attrs.BackendType, ps.State}]++
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b status.Peer) int { return compareKeys(a.Key, b.Key) })
	d.m.peers.Reset()
	for k, v := range n {
		d.m.peers.WithLabelValues(k[0], k[1]).Set(float64(v))
	}
	return out
}

// compareKeys orders lease keys by subnet address.
func compareKeys(a, b string) int {
	pa, _, _ := subnet.ParseKey(a)
	pb, _, _ := subnet.ParseKey(b)
	return cmp.Or(pa.Addr().Compare(pb.Addr()), strings.Compare(a, b))
}

// recreateDevice brings back an overlay device deleted under the daemon. A new device has a
// new MAC, which peers must learn: the lease is published again with it.
func (d *daemon) recreateDevice(ctx context.Context, dev backend.VXLANDevice) error {
	mac, err := d.plane.EnsureVXLAN(dev)
	if err != nil {
		return fmt.Errorf("overlay device %s: %w", dev.Name, err)
	}
	d.attrs.BackendData = vxlan.Data{VNI: dev.VNI, VtepMAC: mac}.Encode()
	if !d.attrs.Equal(d.own.Attrs) {
		d.own.Attrs = d.attrs
		d.renew(ctx) // Renew sees attributes differing from the stored ones and publishes ours
	}
	return nil
}

// noteSkipped logs and counts each skipped peer once per reason.
func (d *daemon) noteSkipped(skipped []backend.Skipped) {
	now := make(map[string]backend.Skipped, len(skipped))
	for _, s := range skipped {
		now[s.Key] = s
		if d.skipped[s.Key].Reason != s.Reason {
			d.log.Warn("skipping peer lease", "lease", s.Key, "reason", s.Reason)
			d.m.skipped.WithLabelValues(s.Code).Inc()
		}
	}
	d.skipped = now
}
