package windows

import (
	"context"
	"errors"
	"strings"

	"github.com/weftnet/weft/backend"
)

// watchers are the running Watches of the plane's families. One network serves both, so
// one of them at a time looks at it, for all: the others wait to take over should it end.
type watchers struct {
	drift   map[int]watcher // by registration
	next    int
	looking bool
	handoff chan struct{} // closed when the Watch that looks ends
}

// watcher is one family's Watch: whom to tell of drift.
type watcher struct {
	fam   backend.Family
	drift func()
}

// Watch implements backend.Plane until ctx is done. HNS tells no one of changes, so the plane
// looks at its network every WatchInterval (one query, whichever families watch): a network
// that is gone or was made again (HNS restarted: non-persistent networks do not survive it;
// someone deleted it) is drift for every family, and so is HNS answering again after it was
// stopped, since what it held may be gone. A family whose model the other's full Apply had
// to drop (it found the network made again, and with it the host's vNIC and its routes) is
// told at the next look. The daemon's full Apply that follows finds what is missing (a
// missing Overlay network is a MissingDeviceError: Prepare makes it again). A policy, an
// endpoint or a route changed under a network that stays is left to the daemon's periodic
// resync. drift is called from the goroutine of whichever Watch looks, never from two at
// once.
func (p *Plane) Watch(ctx context.Context, drift func()) error {
	return p.watchFamily(ctx, backend.IPv4, drift)
}

func (p *Plane) watchFamily(ctx context.Context, fam backend.Family, drift func()) error {
	p.mu.Lock()
	w := &p.watch
	if w.drift == nil {
		w.drift = map[int]watcher{}
	}
	id := w.next
	w.next++
	w.drift[id] = watcher{fam: fam, drift: drift}
	p.mu.Unlock()
	for {
		p.mu.Lock()
		lead := !w.looking
		if lead {
			w.looking, w.handoff = true, make(chan struct{})
		}
		handoff := w.handoff
		p.mu.Unlock()
		if lead {
			p.look(ctx)
		} else {
			select {
			case <-ctx.Done():
			case <-handoff:
				continue // the Watch that looked ended: this one may look from now on
			}
		}
		p.mu.Lock()
		delete(w.drift, id)
		if lead {
			w.looking = false
			close(handoff)
		}
		p.mu.Unlock()
		return nil
	}
}

// look looks at the network every WatchInterval until ctx is done, telling the watchers of
// what it finds.
func (p *Plane) look(ctx context.Context) {
	stopped := false
	for {
		if err := p.cfg.Sleep(ctx, p.cfg.WatchInterval); err != nil {
			return
		}
		p.mu.Lock()
		name, id, valid := p.net.network, p.net.networkID, p.net.valid()
		repair := p.net.repair
		p.net.repair = nil
		p.mu.Unlock()
		if len(repair) > 0 {
			p.log.Info("the other family's full Apply found the HNS network made again; repairing", "network", name, "families", repair)
			p.drifted(repair...)
		}
		if !valid {
			continue // no full Apply yet, or one failed: the daemon retries it anyway
		}
		n, err := p.hns.NetworkByName(name)
		switch {
		case errors.Is(err, ErrStopped):
			if !stopped {
				p.log.Warn("HNS is not running; pods' traffic may stop until it is back", "network", name, "err", err)
			}
			stopped = true
		case errors.Is(err, ErrNotFound) || err == nil && !strings.EqualFold(n.ID, id):
			p.log.Warn("HNS network gone or made again; repairing", "network", name, "id", id)
			stopped = false
			p.drifted(backend.IPv4, backend.IPv6)
		case err != nil:
			p.log.Debug("looking at the HNS network failed", "network", name, "err", err)
		case stopped:
			p.log.Info("HNS is back; checking what it holds", "network", name)
			stopped = false
			p.drifted(backend.IPv4, backend.IPv6)
		}
	}
}

// drifted tells the Watches of the families fams of drift.
func (p *Plane) drifted(fams ...backend.Family) {
	p.mu.Lock()
	var tell []func()
	for _, w := range p.watch.drift {
		for _, f := range fams {
			if w.fam == f {
				tell = append(tell, w.drift)
			}
		}
	}
	p.mu.Unlock()
	for _, f := range tell {
		f()
	}
}
