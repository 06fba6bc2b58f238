package linux

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// subscriptionBuffer is the receive buffer of the route and neighbour subscriptions: an Apply
// may write tens of thousands of entries in a second (thousands of leases joining at once, a
// device made again), and each comes back as a notification; a smaller buffer overflows
// (ENOBUFS), and the lost updates cost another full Apply. The kernel uses the room only
// while notifications wait. (The start-up's first Apply comes before the daemon subscribes.)
const subscriptionBuffer = 32 << 20

// resubscribeDelay spaces out new subscriptions after the kernel dropped one, so a namespace
// that floods us is not answered with a busy loop.
const resubscribeDelay = time.Second

// Watch calls changed whenever a route, neighbour, link or address changes in the Plane's
// namespace in a way its model did not expect (an entry of its deleted or altered, a stray
// one it would delete, the device gone or down), so the caller can apply the whole State and
// restore what was lost; the kernel's echo of the plane's own writes is not drift. It calls
// changed once as soon as it is subscribed, to cover what changed before, and again whenever
// the kernel dropped a subscription (updates were lost). Calls are made on Watch's goroutine,
// never concurrently; changes that happen during a call are coalesced into one further call.
// Watch returns nil when ctx is done, or an error when it cannot subscribe.
func (p *Plane) Watch(ctx context.Context, changed func()) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait() // the subscriptions are closed and drained: no goroutine outlives Watch
	}()

	kick := make(chan struct{}, 1)
	notify := func() {
		select {
		case kick <- struct{}{}:
		default: // a call is already pending; it will see this change too
		}
	}
	failed := make(chan error, 4)
	var subscribed sync.WaitGroup
	subscribed.Add(4)
	run := func(f func() error) {
		wg.Go(func() {
			if err := f(); err != nil {
				failed <- err
			}
		})
	}
	ns := p.ns
	run(func() error {
		return follow(ctx, p.log, "route", subscribed.Done, notify,
			func(ch chan netlink.RouteUpdate, onErr func(error)) error {
				return netlink.RouteSubscribeWithOptions(ch, ctx.Done(),
					netlink.RouteSubscribeOptions{Namespace: &ns, ErrorCallback: onErr,
						ReceiveBufferSize: subscriptionBuffer, ReceiveBufferForceSize: true})
			},
			func(u netlink.RouteUpdate) bool {
				if u.Table != unix.RT_TABLE_MAIN {
					return false
				}
				k := fromRoute(u.Route, p.model.names())
				return p.model.unexpectedRoute(routeNote{Del: u.Type == unix.RTM_DELROUTE, Route: k.Route, ProtoKernel: k.ProtoKernel})
			})
	})
	run(func() error {
		return follow(ctx, p.log, "neighbour", subscribed.Done, notify,
			func(ch chan netlink.NeighUpdate, onErr func(error)) error {
				return netlink.NeighSubscribeWithOptions(ch, ctx.Done(),
					netlink.NeighSubscribeOptions{Namespace: &ns, ErrorCallback: onErr,
						ReceiveBufferSize: subscriptionBuffer, ReceiveBufferForceSize: true})
			},
			p.unexpectedNeigh)
	})
	run(func() error {
		return follow(ctx, p.log, "link", subscribed.Done, notify,
			func(ch chan netlink.LinkUpdate, onErr func(error)) error {
				return netlink.LinkSubscribeWithOptions(ch, ctx.Done(),
					netlink.LinkSubscribeOptions{Namespace: &ns, ErrorCallback: onErr})
			},
			func(u netlink.LinkUpdate) bool {
				a := u.Link.Attrs()
				return p.model.unexpectedLink(linkNote{Del: u.Header.Type == unix.RTM_DELLINK, Name: a.Name, Up: a.Flags&unix.IFF_UP != 0})
			})
	})
	run(func() error {
		return follow(ctx, p.log, "address", subscribed.Done, notify,
			func(ch chan netlink.AddrUpdate, onErr func(error)) error {
				return netlink.AddrSubscribeWithOptions(ch, ctx.Done(),
					netlink.AddrSubscribeOptions{Namespace: &ns, ErrorCallback: onErr})
			},
			func(u netlink.AddrUpdate) bool {
				if u.LinkIndex != p.model.deviceIndex() {
					return false
				}
				return p.model.unexpectedAddr(addrNote{Del: !u.NewAddr, Prefix: prefixOf(&u.LinkAddress)})
			})
	})

	subscribed.Wait()
	select {
	case err := <-failed:
		return err
	default:
	}
	notify()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-failed:
			return err
		case <-kick:
			changed()
		}
	}
}

// unexpectedNeigh judges a neighbour or FDB notification against the model. Only the overlay
// device's entries can be ours; the ARP/NDP churn of ordinary neighbours elsewhere is not.
func (p *Plane) unexpectedNeigh(u netlink.NeighUpdate) bool {
	if u.LinkIndex != p.model.deviceIndex() {
		return false
	}
	del := u.Type == unix.RTM_DELNEIGH
	permanent := u.State&netlink.NUD_PERMANENT != 0
	if u.Family == unix.AF_BRIDGE {
		return p.model.unexpectedFDB(fdbNote{Del: del, MAC: macOf(u.HardwareAddr), Dst: addrOf(u.IP), Permanent: permanent})
	}
	return p.model.unexpectedNeigh(neighNote{Del: del, IP: addrOf(u.IP), MAC: macOf(u.HardwareAddr), Permanent: permanent})
}

// follow keeps one netlink subscription alive until ctx is done, calling notify for each
// relevant update. When the kernel drops the subscription (ENOBUFS: updates were lost) it
// subscribes again and notifies, since what was lost may have mattered. subscribed is called
// once, after the first attempt.
func follow[U any](ctx context.Context, log *slog.Logger, kind string, subscribed, notify func(),
	subscribe func(chan U, func(error)) error, relevant func(U) bool) error {
	first := true
	for {
		ch := make(chan U, 64)
		lastErr := make(chan error, 1)
		onErr := func(err error) { // called from the library's one receiving goroutine
			select {
			case <-lastErr:
			default:
			}
			lastErr <- err
		}
		err := subscribe(ch, onErr)
		if first {
			first = false
			subscribed()
		}
		if err != nil {
			return fmt.Errorf("subscribing to %s updates: %w", kind, err)
		}
		for u := range ch {
			if relevant(u) {
				notify()
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		var cause error
		select {
		case cause = <-lastErr:
		default:
		}
		log.Warn("netlink subscription ended, subscribing again", "updates", kind, "err", cause)
		notify()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(resubscribeDelay):
		}
	}
}
