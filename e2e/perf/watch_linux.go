package perf

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// watchBuffer is the receive buffer of the route subscription: 20,000 route messages with
// their kernel overhead fit several times over, so a daemon programming them in one burst
// does not overflow it.
const watchBuffer = 64 << 20

// routeWatch keeps the set of IPv4 routes of a network namespace's main table that lie inside
// the cluster network, each with the time it was first seen, from a netlink subscription. It
// also counts the routes to an expected set of subnets (Expect), noting when the first and
// the last of them appeared.
type routeWatch struct {
	ns      netns.NsHandle
	network netip.Prefix
	log     *slog.Logger

	mu      sync.Mutex
	present map[netip.Prefix]time.Time
	want    map[netip.Prefix]struct{}
	have    int       // routes present in want
	first   time.Time // when the first route of want appeared
	all     time.Time // when have first reached len(want)
	resyncs int       // subscriptions lost to an overflow and replaced by a dump
	err     error     // a subscription that could not be replaced

	changed chan struct{} // a token after every batch of changes
	stop    chan struct{}
	done    chan struct{}
}

// watchRoutes starts watching the named namespace's routes inside network.
func watchRoutes(nsName string, network netip.Prefix, log *slog.Logger) (*routeWatch, error) {
	h, err := netns.GetFromName(nsName)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", nsName, err)
	}
	return watchRoutesIn(h, network, log)
}

// watchRoutesIn starts watching the routes inside network of the namespace h, which it
// closes when it is closed (or fails to start).
func watchRoutesIn(h netns.NsHandle, network netip.Prefix, log *slog.Logger) (*routeWatch, error) {
	w := &routeWatch{
		ns: h, network: network, log: log,
		present: make(map[netip.Prefix]time.Time),
		changed: make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	updates, errc, err := w.subscribe(true)
	if err != nil {
		h.Close()
		return nil, err
	}
	go w.run(updates, errc)
	return w, nil
}

// subscribe opens a route subscription; its channel closes when the subscription fails
// (after an error on errc) or when the watch stops.
func (w *routeWatch) subscribe(listExisting bool) (<-chan netlink.RouteUpdate, <-chan error, error) {
	updates := make(chan netlink.RouteUpdate, 4096)
	errc := make(chan error, 1)
	err := netlink.RouteSubscribeWithOptions(updates, w.stop, netlink.RouteSubscribeOptions{
		Namespace:    &w.ns,
		ListExisting: listExisting,
		ErrorCallback: func(err error) {
			select {
			case errc <- err:
			default:
			}
		},
		ReceiveBufferSize:      watchBuffer,
		ReceiveBufferForceSize: true,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("subscribing to the routes of the namespace: %w", err)
	}
	return updates, errc, nil
}

func (w *routeWatch) run(updates <-chan netlink.RouteUpdate, errc <-chan error) {
	defer close(w.done)
	for {
		u, ok := <-updates
		closed := !ok
		if ok {
			closed = w.applyBatch(u, updates)
			w.signal()
		}
		if !closed {
			continue
		}
		select {
		case <-w.stop:
			return
		default:
		}
		// The kernel dropped messages (ENOBUFS) or the socket failed: start over with a
		// new subscription and a dump of what is there now.
		var cause error
		select {
		case cause = <-errc:
		default:
		}
		var err error
		if updates, errc, err = w.resync(cause); err != nil {
			w.mu.Lock()
			w.err = err
			w.mu.Unlock()
			w.signal()
			return
		}
	}
}

// maxBatch bounds how many updates are applied under one lock.
const maxBatch = 1024

// applyBatch applies u and what else is queued, up to maxBatch; it reports whether the
// channel was found closed.
func (w *routeWatch) applyBatch(u netlink.RouteUpdate, updates <-chan netlink.RouteUpdate) (closed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apply(u, time.Now())
	for range maxBatch {
		select {
		case u, ok := <-updates:
			if !ok {
				return true
			}
			w.apply(u, time.Now())
		default:
			return false
		}
	}
	return false
}

// clusterRoute is the destination of a route that a watch counts: a unicast IPv4 route of
// the main table to a subnet of the network, whatever its next hop.
func clusterRoute(network netip.Prefix, r netlink.Route) (netip.Prefix, bool) {
	if r.Table != unix.RT_TABLE_MAIN || r.Type != unix.RTN_UNICAST || r.Dst == nil {
		return netip.Prefix{}, false
	}
	p, ok := prefixOf(r.Dst)
	if !ok || !p.Addr().Is4() || p.Bits() <= network.Bits() || !network.Contains(p.Addr()) {
		return netip.Prefix{}, false
	}
	return p, true
}

// prefixOf converts a route destination.
func prefixOf(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), bits), true
}

// apply records one update; w.mu is held.
func (w *routeWatch) apply(u netlink.RouteUpdate, now time.Time) {
	p, ok := clusterRoute(w.network, u.Route)
	if !ok {
		return
	}
	_, wanted := w.want[p]
	_, had := w.present[p]
	switch u.Type {
	case unix.RTM_NEWROUTE:
		if had {
			return
		}
		w.present[p] = now
		if wanted {
			w.have++
			if w.have == 1 && w.first.IsZero() {
				w.first = now
			}
			if w.have == len(w.want) && w.all.IsZero() {
				w.all = now
			}
		}
	case unix.RTM_DELROUTE:
		if !had {
			return
		}
		delete(w.present, p)
		if wanted {
			w.have--
		}
	}
}

// signal wakes a waiter.
func (w *routeWatch) signal() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// resync replaces a lost subscription: a new one first, then a dump, so that nothing
// between the two is missed. Routes found are dated now, unless they were known.
func (w *routeWatch) resync(cause error) (<-chan netlink.RouteUpdate, <-chan error, error) {
	w.log.Warn("route subscription lost; replacing it and dumping the routes", "cause", cause)
	updates, errc, err := w.subscribe(false)
	if err != nil {
		return nil, nil, err
	}
	routes, err := listRoutes(w.ns)
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.resyncs++
	old := w.present
	w.present = make(map[netip.Prefix]time.Time, len(routes))
	for _, r := range routes {
		if p, ok := clusterRoute(w.network, r); ok {
			if t, ok := old[p]; ok {
				w.present[p] = t
			} else {
				w.present[p] = now
			}
		}
	}
	w.recount()
	return updates, errc, nil
}

// recount recomputes the counts of want from what is present; w.mu is held.
func (w *routeWatch) recount() {
	w.have = 0
	var first, last time.Time
	for p := range w.want {
		t, ok := w.present[p]
		if !ok {
			continue
		}
		w.have++
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if w.first.IsZero() {
		w.first = first
	}
	if w.all.IsZero() && w.have == len(w.want) && w.have > 0 {
		w.all = last
	}
}

// Expect sets the subnets to count and forgets when earlier ones appeared.
func (w *routeWatch) Expect(want map[netip.Prefix]struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.want = want
	w.first, w.all = time.Time{}, time.Time{}
	w.recount()
}

// watchStatus is a snapshot of the counts of Expect.
type watchStatus struct {
	have, want int
	first, all time.Time // zero until then
	resyncs    int
	err        error
}

// Status returns the counts of the expected routes.
func (w *routeWatch) Status() watchStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	return watchStatus{have: w.have, want: len(w.want), first: w.first, all: w.all, resyncs: w.resyncs, err: w.err}
}

// SeenAt is when the route to p appeared, if it is there.
func (w *routeWatch) SeenAt(p netip.Prefix) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.present[p]
	return t, ok
}

// Changed delivers a token after changes: wait on it instead of polling.
func (w *routeWatch) Changed() <-chan struct{} { return w.changed }

// Close ends the watch.
func (w *routeWatch) Close() {
	close(w.stop)
	<-w.done
	w.ns.Close()
}

// listRoutes dumps the IPv4 routes of the main table of a namespace, retrying a dump that a
// concurrent change interrupted.
func listRoutes(ns netns.NsHandle) ([]netlink.Route, error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in the namespace: %w", err)
	}
	defer h.Close()
	for attempt := 0; ; attempt++ {
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 10 {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing routes: %w", err)
		}
		return routes, nil
	}
}
