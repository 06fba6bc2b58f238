package daemon

import (
	"context"
	"errors"
	"fmt"
	"github.com/weftnet/weft/netif"
	"io/fs"
	"log/slog"
	"net/netip"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// Deps are what Run works with; tests put their own in.
type Deps struct {
	Manager    subnet.Manager
	Plane      backend.Plane
	Interfaces func() ([]netif.Interface, error)
	DefaultIf  func() (string, error)
	// GOOS is the OS whose data plane Plane programs, whose defaults and limits the config
	// is read with: runtime.GOOS when empty. (Tests drive the Windows plane on Linux.)
	GOOS    string
	metrics *metrics // made by RunWith when nil
}

// Run runs weftd on the OS's data plane until ctx is done; defaultIf names the interface of
// the default route. It returns an error only when it cannot go on: a bad config, no usable
// interface, a data plane that cannot be set up.
func Run(ctx context.Context, cfg Config, log *slog.Logger, plane backend.Plane, defaultIf func() (string, error)) error {
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
	return RunWith(ctx, cfg, log, Deps{
		Manager:    sm,
		Plane:      plane,
		Interfaces: netif.List,
		DefaultIf:  defaultIf,
		metrics:    m,
	})
}

// RunWith is Run on the given dependencies. It returns once every goroutine it started has
// ended.
func RunWith(ctx context.Context, cfg Config, log *slog.Logger, deps Deps) error {
	if deps.metrics == nil {
		deps.metrics = newMetrics()
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	if deps.GOOS == "" {
		deps.GOOS = runtime.GOOS
	}
	d := &daemon{cfg: cfg, log: log, sm: deps.Manager, plane: deps.Plane, m: deps.metrics, goos: deps.GOOS,
		pending: map[string]time.Time{}}
	var check func() error
	if c, ok := deps.Manager.(subnet.Checker); ok {
		check = c.Check
	}
	d.health = newHealth(cfg, d.m, check)
	d.health.peers = d.peerStatus
	d.m.peers.count = d.peerCounts
	wg.Go(func() { d.health.watchDatastore(ctx) })
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
	return d.loop(ctx, &wg)
}

type daemon struct {
	cfg    Config
	log    *slog.Logger
	sm     subnet.Manager
	plane  backend.Plane
	health *health
	m      *metrics
	goos   string

	net *subnet.Config
	ext netif.External
	b   *backend.Backend
	own subnet.Lease

	// mu guards set, which the loop changes and /status and /metrics read.
	mu  sync.Mutex
	set *backend.Set

	result  backend.Result       // peer changes not yet applied
	full    bool                 // the next Apply must be a full one
	pending map[string]time.Time // lease keys changed since the last convergence: when first seen

	stored    subnet.LeaseAttrs // the own lease as the datastore last showed it
	inStore   bool              // the own lease is in the datastore
	synced    bool              // the first watch batch arrived
	lastRenew time.Time
	notified  bool // systemd was told weftd is ready
	// startupDone is when the first convergence ended.
	startupDone time.Time
	ready       bool // the datastore was told the node's network works (Kubernetes: NetworkUnavailable=False)
}

// setUp does everything before the loop: config, interface, backend, lease (with the device
// made for it), subnet.env.
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
	d.b, err = backend.New(d.net, backend.Node{Underlay: d.ext.Name, Addr: d.ext.Addr, MTU: d.ext.MTU,
		Connected: d.ext.Connected, PublicIP: d.ext.PublicIP}, d.goos)
	if err != nil {
		return err
	}
	d.health.update(func(h *health) {
		h.status.Interface, h.status.Address, h.status.PublicIP = d.ext.Name, d.ext.Addr.String(), d.ext.PublicIP.String()
		h.status.Backend = d.net.Backend.Type
	})

	// The device is made for the subnet the acquisition picks (HNS needs it; on Linux it is
	// the same step), and its MAC published with that one acquisition.
	req := subnet.AcquireRequest{Attrs: d.b.Attrs(backend.MAC{}), Prepare: func(ctx context.Context, sn, _ netip.Prefix) (subnet.LeaseAttrs, error) {
		mac, err := d.plane.Prepare(ctx, d.b.State(sn, d.cfg.IPMasq))
		if err != nil {
			return subnet.LeaseAttrs{}, fmt.Errorf("data plane: %w", err)
		}
		return d.b.Attrs(mac), nil
	}}
	switch env, err := subnet.ReadEnv(d.cfg.SubnetFile); {
	case err == nil:
		req.Previous, req.PreviousIPv6 = env.LeaseSubnets()
	case !errors.Is(err, fs.ErrNotExist):
		d.log.Warn("ignoring unreadable subnet file", "path", d.cfg.SubnetFile, "err", err)
	}
	if d.own, err = d.acquire(ctx, req); err != nil {
		return err
	}
	d.mu.Lock() // /status may be asked already
	d.set = backend.NewSet(d.b, d.own, d.cfg.IPMasq)
	d.mu.Unlock()
	d.full = true
	d.leaseChanged()
	return d.writeEnv()
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
			if err = cfg.CheckFor(d.goos); err != nil {
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

// startupEchoes is how long the kernel's notifications of the first convergence's writes
// take to be read, at most: a notification per entry, 80,000 at 20,000 peers.
const startupEchoes = 2 * time.Second

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
	env := subnet.NewEnv(d.net.Network, d.own.Subnet, netip.Prefix{}, netip.Prefix{}, d.b.MTU(), d.cfg.IPMasq)
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

// loop keeps the data plane converged until ctx is done. The goroutines it starts are
// counted in wg.
func (d *daemon) loop(ctx context.Context, wg *sync.WaitGroup) error {
	events := make(chan []subnet.Event, 16)
	watchDone := make(chan error, 1)
	wg.Go(func() { watchDone <- d.sm.Watch(ctx, events) })
	drift := make(chan struct{}, 1)
	wg.Go(func() {
		err := d.plane.Watch(ctx, func() {
			select {
			case drift <- struct{}{}:
			default:
			}
		})
		if err != nil && ctx.Err() == nil {
			d.log.Warn("watching the data plane for drift stopped; relying on the periodic resync", "err", err)
		}
	})

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
			d.synced = true
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
			d.full = true
		case <-resync.C:
			d.full = true
		case <-startupGarbage.C:
			if !d.startupDone.IsZero() && time.Since(d.startupDone) >= startupEchoes {
				debug.FreeOSMemory()
				startupGarbage.Stop()
			}
		case <-retryConverge.C:
			d.full = true
		case <-renew.C:
			d.renew(ctx)
			renew.Reset(d.renewIn())
		}
		inStore := d.inStore && d.stored.Equal(d.own.Attrs)
		d.health.update(func(h *health) { h.synced, h.ownInStore = d.synced, inStore })
		if d.synced && !inStore && time.Since(d.lastRenew) > 5*time.Second {
			// Our lease is gone or was overwritten: get it back now, not at renewal time.
			d.log.Warn("own lease missing or changed in the datastore, renewing", "lease", d.own.Key())
			d.renew(ctx)
			renew.Reset(d.renewIn())
		}
		if d.synced && (d.full || len(d.result.Changes) > 0) {
			if err := d.converge(ctx); err != nil {
				d.log.Error("converging the data plane failed; retrying", "err", err)
				retryConverge.Reset(time.Second)
			}
		}
	}
}

// take folds a batch of lease events into the peer set.
func (d *daemon) take(batch []subnet.Event) {
	now := time.Now()
	skippedBefore := len(d.result.Skipped)
	d.mu.Lock()
	for _, ev := range batch {
		k := ev.Lease.Key()
		d.m.eventsReceived.WithLabelValues(ev.Type.String()).Inc()
		if k == d.own.Key() {
			d.inStore, d.stored = ev.Type == subnet.EventAdded, ev.Lease.Attrs
			continue
		}
		if _, seen := d.pending[k]; !seen {
			d.pending[k] = now
		}
		switch ev.Type {
		case subnet.EventAdded:
			d.set.Put(ev.Lease, &d.result)
		case subnet.EventRemoved:
			d.set.Remove(k, &d.result)
		}
	}
	d.mu.Unlock()
	d.noteSkipped(d.result.Skipped[skippedBefore:])
}

// noteSkipped logs and counts leases newly skipped.
func (d *daemon) noteSkipped(skipped []backend.Skipped) {
	for _, s := range skipped {
		d.log.Warn("skipping peer lease", "lease", s.Key, "reason", s.Reason)
		d.m.skipped.WithLabelValues(s.Code).Inc()
	}
}

func (d *daemon) renewIn() time.Duration {
	if d.own.Expiration.IsZero() {
		return time.Hour // a reservation: nothing to renew, but look again now and then
	}
	return max(time.Until(d.own.Expiration)-d.cfg.RenewMargin, time.Second)
}

// renew renews the own lease, publishing d.own's attributes, and follows a change of the
// subnet.
func (d *daemon) renew(ctx context.Context) {
	d.lastRenew = time.Now()
	l, err := timed(d, "renew", func() (subnet.Lease, error) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		return d.sm.Renew(rctx, d.own)
	})
	if err != nil {
		d.m.renewals.WithLabelValues("error").Inc()
		d.log.Error("renewing the lease failed", "lease", d.own.Key(), "err", err)
		return
	}
	changed := !l.SameSubnets(d.own)
	if changed {
		d.m.renewals.WithLabelValues("changed").Inc()
		d.log.Error("own subnet changed: pods on the old subnet lose connectivity until they restart", "old", d.own.Subnet, "new", l.Subnet)
	} else {
		d.m.renewals.WithLabelValues("success").Inc()
	}
	d.setOwn(l)
	if changed {
		if err := d.writeEnv(); err != nil {
			d.log.Error("rewriting subnet.env", "err", err)
		}
	}
}

// setOwn makes l the own lease: every peer is weighed against it again.
func (d *daemon) setOwn(l subnet.Lease) {
	if !l.SameSubnets(d.own) || !l.Attrs.Equal(d.own.Attrs) { // not just a new expiry
		skippedBefore := len(d.result.Skipped)
		d.mu.Lock()
		if d.set.SetOwn(l, &d.result) {
			d.full = true
		}
		d.mu.Unlock()
		d.noteSkipped(d.result.Skipped[skippedBefore:])
	}
	d.own = l
	d.leaseChanged()
}

// converge applies what changed since the last convergence: the changed peers only, or
// everything (dump and diff) after a drift, a failure, at the resync and at start.
func (d *daemon) converge(ctx context.Context) error {
	start := time.Now()
	u := backend.Update{Full: d.full}
	if !u.Full {
		u.Peers = d.result.Changes
	}
	d.result = backend.Result{}
	d.mu.Lock() // the plane reads the State, which only the loop changes, but /status reads it too
	st := d.set.State()
	changes, err := d.plane.Apply(ctx, st, u)
	d.mu.Unlock()
	if missing := new(backend.MissingDeviceError); errors.As(err, &missing) {
		d.log.Warn("overlay device gone, creating it again", "device", missing.Name)
		if err = d.recreateDevice(ctx); err == nil {
			var more backend.Changes
			d.mu.Lock()
			more, err = d.plane.Apply(ctx, d.set.State(), backend.Update{Full: true})
			d.mu.Unlock()
			changes = changes.Add(more)
		}
	}
	d.full = err != nil
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
	if len(d.pending) > 64 {
		d.pending = map[string]time.Time{} // clear would keep the room of a start-up's thousands
	} else {
		clear(d.pending)
	}
	if !d.notified {
		d.notified = true
		d.startupDone = time.Now()
		status := fmt.Sprintf("STATUS=subnet %s, %d peers", d.own.Subnet, st.Peers.Len())
		if err := sdNotify(d.cfg.NotifySocket, "READY=1\n"+status); err != nil {
			d.log.Warn("telling systemd weftd is ready", "err", err)
		}
	}
	if !d.ready {
		d.ready = setReady(ctx, d.sm, d.log)
	}
	if changes.Total() > 0 {
		d.log.Info("data plane converged", "changes", changes.String(), "full", u.Full, "peers", st.Peers.Len(), "took", took)
	}
	return nil
}

// recreateDevice brings back an overlay device deleted under the daemon. A new device has a
// new MAC, which peers must learn: the lease is published again with it.
func (d *daemon) recreateDevice(ctx context.Context) error {
	d.mu.Lock()
	st := d.set.State()
	d.mu.Unlock()
	mac, err := d.plane.Prepare(ctx, st)
	if err != nil {
		return fmt.Errorf("data plane: %w", err)
	}
	if attrs := d.b.Attrs(mac); !attrs.Equal(d.own.Attrs) {
		l := d.own
		l.Attrs = attrs
		d.setOwn(l)
		d.renew(ctx) // Renew sees attributes differing from the stored ones and publishes ours
	}
	return nil
}

// peerStatus describes every peer for /status, from the model, when asked.
func (d *daemon) peerStatus() []status.Peer {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.set == nil {
		return nil
	}
	peers := d.set.Peers()
	out := make([]status.Peer, 0, len(peers))
	for _, p := range peers {
		ps := status.Peer{Key: p.Key, Subnet: p.Subnet.String(), PublicIP: p.PublicIP.String(),
			BackendType: p.BackendType, State: "programmed"}
		if p.VTEPMAC != (backend.MAC{}) {
			ps.BackendData = backend.VXLANData{VNI: d.set.State().Device.VNI, VtepMAC: p.VTEPMAC}.Encode()
		}
		if p.Skipped != nil {
			ps.State, ps.Reason = "skipped", p.Skipped.Reason
		}
		out = append(out, ps)
	}
	return out
}

// peerCounts counts the peers by backend type and state, for weft_peers when scraped.
func (d *daemon) peerCounts() map[[2]string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := map[[2]string]int{}
	if d.set == nil {
		return n
	}
	for _, p := range d.set.Peers() {
		state := "programmed"
		if p.Skipped != nil {
			state = "skipped"
		}
		n[[2]string{p.BackendType, state}]++
	}
	return n
}
