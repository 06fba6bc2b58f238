package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"runtime"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/backend/hostgw"
	"github.com/weftnet/weft/backend/vxlan"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// Plane is the data plane of the OS: it makes the system match a backend.State.
type Plane interface {
	// EnsureVXLAN creates or adopts the overlay device and returns its MAC.
	EnsureVXLAN(dev backend.VXLANDevice) (backend.MAC, error)
	// Reconcile converges the system to st, removing only entries owned says are the
	// daemon's. It describes what it changed ("" for nothing). An error that satisfies
	// IsMissingDevice means the overlay device is gone and EnsureVXLAN must run again.
	Reconcile(st backend.State, owned backend.Ownership) (changes string, err error)
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
	Interfaces func() ([]Interface, error)
	DefaultIf  func() (string, error)
}

// Run runs weftd until ctx is done. It returns an error only when it cannot go on: a bad
// config, no usable interface, a data plane that cannot be set up.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	cli, err := etcd.NewClient(etcd.ClientConfig{
		Endpoints: cfg.EtcdEndpoints, CAFile: cfg.EtcdCAFile, CertFile: cfg.EtcdCertFile, KeyFile: cfg.EtcdKeyFile,
		Username: cfg.EtcdUsername, Password: cfg.EtcdPassword,
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	plane, err := newPlane(log)
	if err != nil {
		return fmt.Errorf("data plane: %w", err)
	}
	defer plane.Close()
	return RunWith(ctx, cfg, log, Deps{
		Manager:    etcd.New(cli, etcd.Options{Prefix: cfg.EtcdPrefix, Logger: log}),
		Plane:      plane,
		Interfaces: systemInterfaces,
		DefaultIf:  defaultRouteInterface,
	})
}

// RunWith is Run on the given dependencies.
func RunWith(ctx context.Context, cfg Config, log *slog.Logger, deps Deps) error {
	d := &daemon{cfg: cfg, log: log, sm: deps.Manager, plane: deps.Plane, skipped: map[string]string{}}
	d.health = newHealth(cfg.ResyncInterval)
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

	net       *subnet.Config
	ext       External
	attrs     subnet.LeaseAttrs
	own       subnet.Lease
	mtu       int
	desired   func(own subnet.Lease, peers []subnet.Lease) (backend.State, []backend.Skipped)
	peers     map[string]subnet.Lease // by lease key, own included
	skipped   map[string]string       // lease key -> reason, to log each once
	synced    bool                    // the first watch batch arrived
	lastRenew time.Time
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
	if d.ext, err = pickExternal(d.cfg, ifs, deps.DefaultIf); err != nil {
		return err
	}
	d.log.Info("using interface", "iface", d.ext.Name, "addr", d.ext.Addr, "public_ip", d.ext.PublicIP, "mtu", d.ext.MTU)

	d.attrs = subnet.LeaseAttrs{PublicIP: d.ext.PublicIP, BackendType: d.net.Backend.Type}
	switch d.net.Backend.Type {
	case subnet.BackendVXLAN:
		node := vxlan.Node{Config: d.net, VNI: d.net.Backend.VNIFor(runtime.GOOS), Local: d.ext.Addr,
			Underlay: d.ext.Name, UnderlayMTU: d.ext.MTU, Connected: d.ext.Connected}
		if node.MTU() < 68 {
			return fmt.Errorf("interface %s: MTU %d leaves no room for VXLAN", d.ext.Name, d.ext.MTU)
		}
		mac, err := d.plane.EnsureVXLAN(node.Device())
		if err != nil {
			return fmt.Errorf("overlay device %s: %w", node.Device().Name, err)
		}
		d.attrs.BackendData = vxlan.Data{VNI: node.VNI, VtepMAC: mac}.Encode()
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
	}

	req := subnet.AcquireRequest{Attrs: d.attrs}
	switch env, err := subnet.ReadEnv(d.cfg.SubnetFile); {
	case err == nil:
		req.Previous, req.PreviousIPv6 = env.LeaseSubnets()
	case !errors.Is(err, fs.ErrNotExist):
		d.log.Warn("ignoring unreadable subnet file", "path", d.cfg.SubnetFile, "err", err)
	}
	if d.own, err = d.acquire(ctx, req); err != nil {
		return err
	}
	return d.writeEnv()
}

// waitConfig reads the network config, waiting while there is none or etcd cannot be
// reached; a config that is there but wrong ends start-up.
func (d *daemon) waitConfig(ctx context.Context) (*subnet.Config, error) {
	return retry(ctx, d.log, "read network config", func() (*subnet.Config, bool, error) {
		cfg, err := d.sm.GetConfig(ctx)
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
		l, err := d.sm.Acquire(ctx, req)
		return l, false, err
	})
	if err == nil {
		d.log.Info("lease acquired", "subnet", l.Subnet, "expires", l.Expiration)
	}
	return l, err
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
		return fmt.Errorf("write %s: %w", d.cfg.SubnetFile, err)
	}
	d.health.setEnvWritten()
	return nil
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
		d.health.beat()
		select {
		case <-ctx.Done():
			d.log.Info("stopping; the data plane stays as it is")
			return nil
		case err := <-watchDone:
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("lease watch ended: %w", err)
		case batch := <-events:
			dirty = d.apply(batch) || dirty
			d.synced = true
			// Coalesce: a burst of events is one convergence.
			for drained := false; !drained; {
				select {
				case more := <-events:
					dirty = d.apply(more) || dirty
				default:
					drained = true
				}
			}
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
		if own, ok := d.peers[d.own.Key()]; d.synced && (!ok || !own.Attrs.Equal(d.own.Attrs)) && time.Since(d.lastRenew) > 5*time.Second {
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

// apply folds a batch of lease events into the peer set; it reports whether anything changed.
func (d *daemon) apply(batch []subnet.Event) bool {
	for _, ev := range batch {
		switch ev.Type {
		case subnet.EventAdded:
			d.peers[ev.Lease.Key()] = ev.Lease
		case subnet.EventRemoved:
			delete(d.peers, ev.Lease.Key())
		}
	}
	return true
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
	l, err := d.sm.Renew(ctx, d.own)
	if err != nil {
		d.log.Error("renewing the lease failed", "lease", d.own.Key(), "err", err)
		return false
	}
	changed := !l.SameSubnets(d.own)
	if changed {
		d.log.Error("own subnet changed: pods on the old subnet lose connectivity until they restart", "old", d.own.Subnet, "new", l.Subnet)
	}
	d.own = l
	if changed {
		if err := d.writeEnv(); err != nil {
			d.log.Error("rewriting subnet.env", "err", err)
		}
	}
	return changed
}

func (d *daemon) converge(ctx context.Context) error {
	peers := make([]subnet.Lease, 0, len(d.peers))
	for _, l := range d.peers {
		peers = append(peers, l)
	}
	st, skipped := d.desired(d.own, peers)
	d.logSkipped(skipped)
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
			changes, err = d.plane.Reconcile(st, owned)
		}
	}
	if err == nil && d.cfg.IPMasq {
		var changed bool
		if changed, err = d.plane.Masquerade(d.net.Network, d.own.Subnet); changed {
			changes += " masquerade"
		}
	}
	d.health.converged(err)
	if err != nil {
		return err
	}
	if changes != "" {
		d.log.Info("data plane converged", "changes", changes, "peers", len(peers)-1, "took", time.Since(start))
	}
	return nil
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

// logSkipped logs each skipped peer once per reason.
func (d *daemon) logSkipped(skipped []backend.Skipped) {
	now := map[string]string{}
	for _, s := range skipped {
		now[s.Key] = s.Reason
		if d.skipped[s.Key] != s.Reason {
			d.log.Warn("skipping peer lease", "lease", s.Key, "reason", s.Reason)
		}
	}
	d.skipped = now
}
