package linux

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/weftnet/weft/backend"
)

// WireGuard runs the wireguard backend: the device (the kernel's where the kernel has
// WireGuard, else the same device in user space over TUN, served on its UAPI socket so that
// wgctrl configures both alike), its address, the route of the cluster network through it
// (flannel's one route: the peers are told apart by their allowed IPs) and one WireGuard peer
// per peer lease. What is no WireGuard's (masquerade, forward rules, the blackhole route) is
// the netlink Plane's, which it embeds. A restart of weftd keeps a kernel device, its key and
// its peers as they are; a user-space device lives in weftd and dies with it.
//
// The two families' planes of a node share their WireGuard devices (NewWireGuard, then
// Family): in separate mode each family has a device of its own, in flannel's single-tunnel
// modes both program flannel-wg, and a peer's two halves are one WireGuard peer.
type WireGuard struct {
	*Plane
	log  *slog.Logger
	devs *wgDevices // shared with the other family's plane

	// The family's device, under devs.mu: nil before the first full Apply.
	dev     *backend.WireGuardDevice
	ownNet  netip.Prefix
	network netip.Prefix // routed through dev

	// stats is a wgctrl client of its own for PeerHandshakes, so that a scrape never waits
	// for an Apply holding mu.
	statsMu sync.Mutex
	stats   *wgctrl.Client
}

var _ backend.Plane = (*WireGuard)(nil)

// wgDevices are the WireGuard devices of a node's planes, and what each family programmed
// on them.
type wgDevices struct {
	mu     sync.Mutex
	wg     *wgctrl.Client
	user   map[string]*userDevice // the devices this process runs, by name
	kernel *bool                  // whether the kernel has WireGuard; nil until asked
	// peers is what the families' last Applies programmed, by device name: the
	// incremental Apply's base.
	peers map[string]*wgPeers
	// release is, by device name, the timer that gives held peers their keepalive.
	release map[string]*time.Timer
}

// peersOf is what the families programmed on the device name.
func (ds *wgDevices) peersOf(name string) *wgPeers {
	ps := ds.peers[name]
	if ps == nil {
		ps = newWGPeers()
		ds.peers[name] = ps
	}
	return ps
}

// userDevice is a WireGuard device run by this process.
type userDevice struct {
	dev  *device.Device
	uapi net.Listener
}

// NewWireGuard opens the wireguard data plane on the current thread's network namespace
// (see New).
func NewWireGuard(log *slog.Logger) (*WireGuard, error) {
	p, err := New(log)
	if err != nil {
		return nil, err
	}
	ds := &wgDevices{user: map[string]*userDevice{}, peers: map[string]*wgPeers{}, release: map[string]*time.Timer{}}
	return &WireGuard{Plane: p, log: log, devs: ds}, nil
}

// Family opens another family's plane on the same namespace, sharing w's WireGuard devices.
func (w *WireGuard) Family(log *slog.Logger) (*WireGuard, error) {
	p, err := New(log)
	if err != nil {
		return nil, err
	}
	return &WireGuard{Plane: p, log: log, devs: w.devs}, nil
}

// client is the wgctrl client, opened on first use: a node of another backend opens none.
func (ds *wgDevices) client() (*wgctrl.Client, error) {
	if ds.wg != nil {
		return ds.wg, nil
	}
	c, err := wgctrl.New()
	if err != nil {
		return nil, fmt.Errorf("opening wgctrl: %w", err)
	}
	ds.wg = c
	return c, nil
}

// Implementation says which WireGuard runs the device name: "kernel", "user space", or ""
// before it is made.
func (w *WireGuard) Implementation(name string) string {
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	if w.devs.user[name] != nil {
		return "user space"
	}
	if w.devs.kernel != nil && *w.devs.kernel {
		return "kernel"
	}
	return ""
}

// PeerHandshakes reads the device's peers' latest handshakes.
func (w *WireGuard) PeerHandshakes(dev string) ([]time.Time, error) {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	if w.stats == nil {
		c, err := wgctrl.New()
		if err != nil {
			return nil, fmt.Errorf("opening wgctrl: %w", err)
		}
		w.stats = c
	}
	d, err := w.stats.Device(dev)
	if err != nil {
		return nil, fmt.Errorf("reading WireGuard device %s: %w", dev, err)
	}
	hs := make([]time.Time, len(d.Peers))
	for i, p := range d.Peers {
		hs[i] = p.LastHandshakeTime
	}
	return hs, nil
}

// Close stops the plane. The user-space devices stay up until the process exits, so that a
// weftd shutting down keeps the tunnels while it can.
func (w *WireGuard) Close() error {
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	for name, t := range w.devs.release {
		t.Stop()
		delete(w.devs.release, name)
	}
	var err error
	if w.devs.wg != nil {
		err = w.devs.wg.Close()
		w.devs.wg = nil // the other family's plane shares it
	}
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	if w.stats != nil {
		err = errors.Join(err, w.stats.Close())
	}
	return errors.Join(err, w.Plane.Close())
}

// Prepare makes or adopts the State's WireGuard device and sets its key and port; its peers
// are left as they are (a restart reuses them). Other backends go to the netlink Plane.
func (w *WireGuard) Prepare(ctx context.Context, st *backend.State) (backend.MAC, error) {
	if st.WireGuard == nil {
		return w.Plane.Prepare(ctx, st)
	}
	if err := ctx.Err(); err != nil {
		return backend.MAC{}, err
	}
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	return backend.MAC{}, w.ensureDevice(*st.WireGuard)
}

func (w *WireGuard) ensureDevice(d backend.WireGuardDevice) error {
	link, err := w.h.LinkByName(d.Name)
	var notFound netlink.LinkNotFoundError
	switch {
	case errors.As(err, &notFound):
		if u := w.devs.user[d.Name]; u != nil {
			// Deleted under weftd: what ran it goes too, its socket first, so that the new
			// device can serve its own.
			w.log.Info("the user-space WireGuard device was deleted: making it again", "dev", d.Name)
			u.uapi.Close()
			u.dev.Close()
			delete(w.devs.user, d.Name)
		}
		if err := w.createDevice(d); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("looking up WireGuard device %s: %w", d.Name, err)
	case link.Type() == "wireguard":
		yes := true
		w.devs.kernel = &yes
		w.log.Info("adopting the kernel's WireGuard device", "dev", d.Name)
	case w.devs.user[d.Name] == nil:
		// A TUN device of that name that this process does not run: a user-space device's
		// remains, or someone else's; it cannot carry weft's tunnel.
		w.log.Info("replacing a device that is no WireGuard device of this process", "dev", d.Name, "type", link.Type())
		if err := w.h.LinkDel(link); err != nil {
			return fmt.Errorf("deleting %s (%s) to make the WireGuard device: %w", d.Name, link.Type(), err)
		}
		if err := w.createDevice(d); err != nil {
			return err
		}
	}
	c, err := w.devs.client()
	if err != nil {
		return err
	}
	cfg := wgtypes.Config{PrivateKey: (*wgtypes.Key)(&d.PrivateKey), ListenPort: ptr(int(d.ListenPort))}
	if err := c.ConfigureDevice(d.Name, cfg); err != nil {
		return fmt.Errorf("configuring WireGuard device %s (key, port %d): %w", d.Name, d.ListenPort, err)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// tunDevice is where a TUN device is cloned from.
const tunDevice = "/dev/net/tun"

// createDevice makes the device in the kernel if it has WireGuard, else in user space.
func (w *WireGuard) createDevice(d backend.WireGuardDevice) error {
	if w.devs.kernel == nil || *w.devs.kernel {
		err := w.h.LinkAdd(&netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: d.Name, MTU: d.MTU}})
		has := err == nil || !errors.Is(err, unix.EOPNOTSUPP)
		if w.devs.kernel == nil {
			w.devs.kernel = &has
			if !has {
				w.log.Warn("the kernel has no WireGuard: running the WireGuard devices in user space, in weftd; they stop when weftd does", "err", err)
			}
		}
		if err == nil {
			w.log.Info("made the kernel's WireGuard device", "dev", d.Name, "mtu", d.MTU)
			return nil
		}
		if has {
			return fmt.Errorf("creating WireGuard device %s: %w", d.Name, err)
		}
	}
	t, err := tun.CreateTUN(d.Name, d.MTU)
	if err != nil {
		err = fmt.Errorf("creating TUN device %s for user-space WireGuard: %w", d.Name, err)
		if _, serr := os.Stat(tunDevice); serr != nil || errors.Is(err, fs.ErrPermission) {
			// In a container (weft's DaemonSet) /dev/net/tun is neither there nor allowed.
			err = fmt.Errorf("%w: the kernel has no WireGuard (load the wireguard module, Linux 5.6 and later have it), "+
				"and running it in user space needs /dev/net/tun, which a container gets only when privileged", err)
		}
		return err
	}
	log := w.log.With("dev", d.Name)
	dev := device.NewDevice(t, conn.NewDefaultBind(), &device.Logger{
		Verbosef: func(format string, args ...any) { log.Debug(fmt.Sprintf(format, args...)) },
		Errorf:   func(format string, args ...any) { log.Warn(fmt.Sprintf(format, args...)) },
	})
	f, err := ipc.UAPIOpen(d.Name)
	if err != nil {
		dev.Close()
		return fmt.Errorf("opening the UAPI socket of user-space WireGuard device %s: %w", d.Name, err)
	}
	l, err := ipc.UAPIListen(d.Name, f)
	if err != nil {
		f.Close()
		dev.Close()
		return fmt.Errorf("listening on the UAPI socket of %s: %w", d.Name, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	if err := dev.Up(); err != nil {
		l.Close()
		dev.Close()
		return fmt.Errorf("bringing user-space WireGuard device %s up: %w", d.Name, err)
	}
	w.devs.user[d.Name] = &userDevice{dev: dev, uapi: l}
	w.log.Info("made a user-space WireGuard device", "dev", d.Name, "mtu", d.MTU)
	return nil
}

// Apply makes the system match st: the netlink Plane's part on a full update, then the
// device's link, address, route and every peer; an incremental update writes the changed
// peers only.
func (w *WireGuard) Apply(ctx context.Context, st *backend.State, u backend.Update) (backend.Changes, error) {
	if st.WireGuard == nil {
		return w.Plane.Apply(ctx, st, u)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	full := u.Full || w.dev == nil || *w.dev != *st.WireGuard || w.ownNet != st.Own
	if !full {
		return w.applyPeers(st.Family, st.WireGuard, u.Peers)
	}
	// The netlink Plane programs no peer: they are WireGuard's. It keeps the masquerade,
	// forward rules and blackhole route of the State.
	inner := *st
	inner.WireGuard, inner.Peers = nil, backend.PeerMap{}
	ch, err := w.Plane.Apply(ctx, &inner, backend.Update{Full: true})
	if ch == nil {
		ch = backend.Changes{}
	}
	dev := *st.WireGuard
	w.dev, w.ownNet, w.network = &dev, st.Own, st.Network()
	peers := map[string]backend.Peer{}
	for k, p := range st.Peers.All() {
		peers[k] = p
	}
	w.devs.peersOf(dev.Name).setFamily(st.Family, peers)
	werr := w.reconcile(st, ch)
	return ch, errors.Join(err, werr)
}

// reconcile makes the device's link, address, route and peers those of st.
func (w *WireGuard) reconcile(st *backend.State, ch backend.Changes) error {
	d := st.WireGuard
	link, err := w.h.LinkByName(d.Name)
	if err != nil {
		return &backend.MissingDeviceError{Name: d.Name}
	}
	var errs []error
	if link.Attrs().MTU != d.MTU {
		if err := w.h.LinkSetMTU(link, d.MTU); err != nil {
			errs = append(errs, fmt.Errorf("setting %s's MTU to %d: %w", d.Name, d.MTU, err))
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := w.h.LinkSetUp(link); err != nil {
			errs = append(errs, fmt.Errorf("setting %s up: %w", d.Name, err))
		}
	}
	for _, a := range st.DeviceAddresses() {
		if err := w.h.AddrReplace(link, &netlink.Addr{IPNet: ipNet(a)}); err != nil {
			errs = append(errs, fmt.Errorf("adding address %s to %s: %w", a, d.Name, err))
		}
	}
	if n := st.Network(); n.IsValid() {
		r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipNet(n), Scope: netlink.SCOPE_LINK}
		if !w.routed(n, link.Attrs().Index) {
			if err := w.h.RouteReplace(r); err != nil {
				errs = append(errs, fmt.Errorf("routing %s through %s: %w", n, d.Name, err))
			} else {
				ch[kindRoute.String()]++
			}
		}
	}
	wc, err := w.devs.client()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	dev, err := wc.Device(d.Name)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("reading WireGuard device %s: %w", d.Name, err))...)
	}
	if dev.PrivateKey != wgtypes.Key(d.PrivateKey) || dev.ListenPort != int(d.ListenPort) {
		cfg := wgtypes.Config{PrivateKey: (*wgtypes.Key)(&d.PrivateKey), ListenPort: ptr(int(d.ListenPort))}
		if err := wc.ConfigureDevice(d.Name, cfg); err != nil {
			errs = append(errs, fmt.Errorf("configuring %s's key and port: %w", d.Name, err))
		}
	}
	// Every family's peers on the device: in single-tunnel modes the other family's too.
	ps := w.devs.peersOf(d.Name)
	want := ps.all()
	var cfg wgtypes.Config
	onDevice := make(map[backend.Key]bool, len(dev.Peers))
	for _, have := range dev.Peers {
		k := backend.Key(have.PublicKey)
		onDevice[k] = true
		wp, ok := want[k]
		if !ok {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: have.PublicKey, Remove: true})
			continue
		}
		if peerMatches(have, wp, d, ps.isHeld(k)) {
			delete(want, k)
		}
	}
	held, own := false, publicKey(d)
	for k, wp := range want {
		hold := ps.isHeld(k) || !onDevice[k] && w.holdFirst(ps, d, own, k)
		held = held || hold
		cfg.Peers = append(cfg.Peers, peerConfig(wp, d, hold))
	}
	if len(cfg.Peers) > 0 {
		if err := wc.ConfigureDevice(d.Name, cfg); err != nil {
			errs = append(errs, fmt.Errorf("programming %d WireGuard peers of %s: %w", len(cfg.Peers), d.Name, err))
		} else {
			ch[changeWireGuardPeer] += len(cfg.Peers)
		}
	}
	if held {
		w.armRelease(d.Name, wgAnswerFirst)
	}
	return errors.Join(errs...)
}

// wgAnswerFirst is how long a node holds the keepalive of a peer new to its device when the
// peer is to dial first (answersFirst): long enough for the peer's handshake to come,
// short enough that a peer that does not dial (no keepalive of its own, no traffic) waits
// little for this node's.
const wgAnswerFirst = 500 * time.Millisecond

// holdFirst reports whether the peer k, new to d, is to be programmed without its keepalive
// (answersFirst), and records it; own is d's public key. Without keepalives nothing is held:
// then no side dials when it programs the other.
func (w *WireGuard) holdFirst(ps *wgPeers, d *backend.WireGuardDevice, own, k backend.Key) bool {
	if d.Keepalive <= 0 || !answersFirst(own, k) {
		return false
	}
	ps.hold(k, time.Now())
	return true
}

// publicKey is the public key of d's private key.
func publicKey(d *backend.WireGuardDevice) backend.Key {
	return backend.Key(wgtypes.Key(d.PrivateKey).PublicKey())
}

// armRelease makes the device name's held peers get their keepalives after wait, unless
// a release is already due. Called with devs.mu held.
func (w *WireGuard) armRelease(name string, wait time.Duration) {
	if w.devs.release[name] != nil {
		return
	}
	w.devs.release[name] = time.AfterFunc(wait, func() { w.releaseHeld(name) })
}

// releaseHeld gives the device name's peers held for wgAnswerFirst their keepalive: where
// no handshake has come by then, turning it on makes this node dial.
func (w *WireGuard) releaseHeld(name string) {
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	if w.devs.release[name] == nil {
		return // closed
	}
	delete(w.devs.release, name)
	ps := w.devs.peersOf(name)
	keys, next := ps.due(time.Now(), wgAnswerFirst)
	if next > 0 {
		w.armRelease(name, next)
	}
	if len(keys) == 0 || w.dev == nil || w.dev.Name != name || w.devs.wg == nil {
		return
	}
	var cfg wgtypes.Config
	for _, k := range keys {
		if ps.has(k) {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: wgtypes.Key(k), UpdateOnly: true,
				PersistentKeepaliveInterval: ptr(w.dev.Keepalive)})
		}
	}
	if len(cfg.Peers) == 0 {
		return
	}
	if err := w.devs.wg.ConfigureDevice(name, cfg); err != nil {
		// The drift check finds the keepalives missing and a full Apply sets them.
		w.log.Warn("setting the keepalive of WireGuard peers that were to dial first", "dev", name, "peers", len(cfg.Peers), "err", err)
	}
}

// applyPeers programs the WireGuard peers the family fam's changes touch, only: one wgctrl
// call for them all. What was there before is the plane's own record, not the changes'.
func (w *WireGuard) applyPeers(fam backend.Family, d *backend.WireGuardDevice, changes []backend.PeerChange) (backend.Changes, error) {
	ps := w.devs.peersOf(d.Name)
	touched := map[backend.Key]bool{}
	fresh := map[backend.Key]bool{}
	for _, c := range changes {
		if k := c.New.WGKey(); c.New.IsValid() && !ps.has(k) && !touched[k] {
			fresh[k] = true
		}
		for _, k := range ps.set(wgHalf{fam, c.Key}, c.New) {
			touched[k] = true
		}
	}
	var cfg wgtypes.Config
	var own backend.Key
	if len(fresh) > 0 {
		own = publicKey(d)
	}
	held := false
	for k := range touched {
		if wp, ok := ps.want(k); ok {
			// A peer written again while held (the other family's half of it, in a
			// single-tunnel mode) stays held.
			hold := ps.isHeld(k) || fresh[k] && w.holdFirst(ps, d, own, k)
			held = held || hold
			cfg.Peers = append(cfg.Peers, peerConfig(wp, d, hold))
		} else {
			cfg.Peers = append(cfg.Peers, wgtypes.PeerConfig{PublicKey: wgtypes.Key(k), Remove: true})
		}
	}
	if len(cfg.Peers) == 0 {
		return backend.Changes{}, nil
	}
	wc, err := w.devs.client()
	if err != nil {
		return backend.Changes{}, err
	}
	if err := wc.ConfigureDevice(d.Name, cfg); err != nil {
		return backend.Changes{}, fmt.Errorf("programming %d WireGuard peers of %s: %w", len(cfg.Peers), d.Name, err)
	}
	if held {
		w.armRelease(d.Name, wgAnswerFirst)
	}
	return backend.Changes{changeWireGuardPeer: len(cfg.Peers)}, nil
}

// peerConfig is wp as a WireGuard peer of the device d: its subnets as allowed IPs, its
// endpoint, d's keepalive (none while held) and preshared key.
func peerConfig(wp wgPeer, d *backend.WireGuardDevice, held bool) wgtypes.PeerConfig {
	keepalive := d.Keepalive
	if held {
		keepalive = 0
	}
	pc := wgtypes.PeerConfig{
		PublicKey:                   wgtypes.Key(wp.key),
		Endpoint:                    net.UDPAddrFromAddrPort(wp.endpoint),
		PersistentKeepaliveInterval: ptr(keepalive),
		ReplaceAllowedIPs:           true,
	}
	for _, a := range wp.allowed {
		pc.AllowedIPs = append(pc.AllowedIPs, *ipNet(a))
	}
	if !d.PSK.IsZero() {
		pc.PresharedKey = (*wgtypes.Key)(&d.PSK)
	}
	return pc
}

// peerMatches reports whether the device's peer have is wp as peerConfig programs it; a
// held peer may have its keepalive or none yet.
func peerMatches(have wgtypes.Peer, wp wgPeer, d *backend.WireGuardDevice, held bool) bool {
	if have.Endpoint == nil {
		return false
	}
	keepalive := have.PersistentKeepaliveInterval == d.Keepalive || held && have.PersistentKeepaliveInterval == 0
	// wgctrl reads IPv4 endpoints as IPv4-mapped IPv6 addresses.
	ep := have.Endpoint.AddrPort()
	if netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port()) != wp.endpoint ||
		!keepalive || have.PresharedKey != wgtypes.Key(d.PSK) ||
		len(have.AllowedIPs) != len(wp.allowed) {
		return false
	}
	for _, n := range have.AllowedIPs {
		a, ok := netip.AddrFromSlice(n.IP)
		ones, _ := n.Mask.Size()
		if !ok || !slices.Contains(wp.allowed, netip.PrefixFrom(a.Unmap(), ones)) {
			return false
		}
	}
	return true
}

// routed reports whether the network n is routed through the device of index dev, alone.
func (w *WireGuard) routed(n netip.Prefix, dev int) bool {
	have, err := w.h.RouteListFiltered(netlinkFamily(n), &netlink.Route{Dst: ipNet(n)}, netlink.RT_FILTER_DST)
	return err == nil && len(have) == 1 && have[0].LinkIndex == dev && have[0].Gw == nil
}

func netlinkFamily(p netip.Prefix) int {
	if p.Addr().Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

// Watch reports the netlink Plane's drift, and the WireGuard device's: the device gone or
// down, the network's route deleted, and (looked at every wgCheckEvery, since no
// notification tells of them) its peers or key changed behind the plane's back.
func (w *WireGuard) Watch(ctx context.Context, drift func()) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex
	report := func() {
		mu.Lock()
		defer mu.Unlock()
		drift()
	}
	errc := make(chan error, 1)
	go func() { errc <- w.Plane.Watch(ctx, report) }()
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, ctx.Done(), netlink.LinkSubscribeOptions{Namespace: &w.ns}); err != nil {
		return fmt.Errorf("subscribing to links: %w", err)
	}
	routes := make(chan netlink.RouteUpdate, 256)
	if err := netlink.RouteSubscribeWithOptions(routes, ctx.Done(), netlink.RouteSubscribeOptions{Namespace: &w.ns}); err != nil {
		return fmt.Errorf("subscribing to routes: %w", err)
	}
	tick := time.NewTicker(wgCheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return <-errc
		case err := <-errc:
			return err
		case u, ok := <-links:
			if !ok {
				return <-errc
			}
			w.devs.mu.Lock()
			ours := w.dev != nil && u.Link.Attrs().Name == w.dev.Name
			w.devs.mu.Unlock()
			if ours && (u.Header.Type == unix.RTM_DELLINK || u.Link.Attrs().Flags&unix.IFF_UP == 0) {
				report()
			}
		case u, ok := <-routes:
			if !ok {
				return <-errc
			}
			w.devs.mu.Lock()
			ours := u.Type == unix.RTM_DELROUTE && w.network.IsValid() && u.Dst != nil && prefixOf(u.Dst) == w.network
			w.devs.mu.Unlock()
			if ours {
				report()
			}
		case <-tick.C:
			if w.drifted() {
				report()
			}
		}
	}
}

// wgCheckEvery is how often Watch compares the device's peers with what it programmed.
const wgCheckEvery = 10 * time.Second

// drifted reports whether the device's route, key, port or peers differ from the last
// Apply's.
func (w *WireGuard) drifted() bool {
	w.devs.mu.Lock()
	defer w.devs.mu.Unlock()
	if w.dev == nil || w.devs.wg == nil {
		return false
	}
	link, err := w.h.LinkByName(w.dev.Name)
	if err != nil || !w.routed(w.network, link.Attrs().Index) {
		return true
	}
	dev, err := w.devs.wg.Device(w.dev.Name)
	if err != nil {
		return true
	}
	want := w.devs.peersOf(w.dev.Name).all()
	if dev.PrivateKey != wgtypes.Key(w.dev.PrivateKey) || dev.ListenPort != int(w.dev.ListenPort) || len(dev.Peers) != len(want) {
		return true
	}
	for _, have := range dev.Peers {
		k := backend.Key(have.PublicKey)
		if wp, ok := want[k]; !ok || !peerMatches(have, wp, w.dev, w.devs.peersOf(w.dev.Name).isHeld(k)) {
			return true
		}
	}
	return false
}
