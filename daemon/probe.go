package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
)

// probeTarget is where a peer answers through what this node programmed for it: its VTEP
// address through the tunnel (VXLAN's or WireGuard's), or, routed, its subnet's gateway (the first address after the
// subnet's own: the CNI bridge's on the peer). Behind it, the echoes of the pods' MTU go to
// the last address before the subnet's broadcast address, which the peer forwards to its
// pods' bridge (the CNI's IPAM hands addresses out from the start of the range). The
// Transport checks the peers reached through the overlay device.
func probeTarget(key string, p backend.Peer) probe.Target {
	a := p.VTEP()
	// A WireGuard peer's device holds its VTEP address, through the tunnel.
	if !p.Overlay() && p.WireGuard == nil {
		a = a.Next()
	}
	return probe.Target{Key: key, Addr: a, Behind: subnet.LastAddr(p.Subnet).Prev(), Transport: p.Overlay()}
}

// startProbes gives every family a Prober sending through pinger, and every family with an
// overlay device whose offload can be switched a Transport checking with checker (when not
// nil), run until ctx is done.
func (d *daemon) startProbes(ctx context.Context, wg *sync.WaitGroup, pinger probe.Pinger, checker probe.Checker) {
	for _, fp := range d.paths {
		fp.startProbes(ctx, wg, pinger, checker, d.cfg.ProbeInterval, d.cfg.ProbePeers)
	}
	d.health.update(func(h *health) { h.overlay, h.overlayStatus = d.paths.overlaySummary, d.paths.overlayStatus })
}

// unreachableChanged is told by a family's Prober that a peer went down (example names it)
// or answers again: the node's count and its Event cover every family.
func (d *daemon) unreachableChanged(example []string) {
	n := d.paths.unreachable()
	d.m.unreachable.Set(float64(n))
	d.events.PeersUnreachable(n, example)
}

// transportCounted is told by a family that its peers of broken transport may have changed.
func (d *daemon) transportCounted() { d.m.transportBroken.Set(float64(d.paths.transportBroken())) }

// pathMTUCounted is told by a family that its peers of short paths may have changed.
func (d *daemon) pathMTUCounted() { d.m.mtuShort.Set(float64(d.paths.shortPaths())) }

// startProbes gives the family a Prober sending through pinger every interval to perInterval
// peers at most and, with an overlay device whose offload can be switched, a Transport
// checking with checker (when not nil), run until ctx is done.
func (fp *familyPath) startProbes(ctx context.Context, wg *sync.WaitGroup, pinger probe.Pinger, checker probe.Checker,
	interval time.Duration, perInterval int) {
	fam, log, m := fp.fam(), fp.cfg.log, fp.cfg.m
	fp.prober = probe.New(probe.Config{Interval: interval, PerInterval: perInterval}, pinger, probe.Hooks{
		Result: func(outcome string, rtt time.Duration) {
			m.probes.WithLabelValues(probe.KindICMP, outcome).Inc()
			if outcome == probe.OutcomeOK {
				m.probeRTT.Observe(rtt.Seconds())
			}
		},
		Changed: func(t probe.Target, down bool, _ int) {
			var example []string
			if down {
				log.Warn("peer unreachable through the data plane", "family", fam, "peer", t.Key, "address", t.Addr)
				// The peer that went down is the example: listing the others would scan
				// every target at each change, O(peers²) when many go down at once.
				example = []string{t.Key}
			} else {
				log.Info("peer reachable again", "family", fam, "peer", t.Key, "address", t.Addr)
			}
			if fp.cfg.hooks.unreachable != nil {
				fp.cfg.hooks.unreachable(example)
			}
		},
	})
	wg.Go(func() { fp.prober.Run(ctx) })
	if checker == nil || fp.off == nil {
		return
	}
	// A check every interval: a peer every few seconds at most, within the peers' ICMP
	// rate limits.
	// The echo of the pods' MTU: the largest packet they send, whatever the family.
	tcfg := probe.TransportConfig{Interval: interval, Gap: max(3*interval, 3*time.Second), MTU: fp.cfg.mtu}
	fp.transport = fp.prober.NewTransport(tcfg, checker, probe.TransportHooks{
		Result:     func(kind, outcome string) { m.probes.WithLabelValues(kind, outcome).Inc() },
		Changed:    func(t probe.Target, broken bool) { fp.transportChanged(ctx, t, broken) },
		MTUChanged: fp.pathMTUChanged,
	})
	wg.Go(func() { fp.transport.Run(ctx) })
}

// Reasons of the Notices about the path MTU.
const (
	NoticePathMTUShort = "OverlayPathMTUTooSmall" // a peer's path carries less than the pods' MTU
	NoticePathMTUWhole = "OverlayPathMTURestored" // it carries the pods' MTU again
)

// pathMTUChanged tells the operator that the path to peer t carries less than the pods'
// MTU (short), or carries it again.
func (fp *familyPath) pathMTUChanged(p probe.ShortPath, short bool) {
	if fp.cfg.hooks.pathMTU != nil {
		fp.cfg.hooks.pathMTU()
	}
	mtu, log := fp.cfg.mtu, fp.cfg.log
	args := []any{"family", fp.fam(), "peer", p.Key, "address", p.Addr, "mtu", mtu}
	if !short {
		msg := fmt.Sprintf("the path to peer %s carries the pods' MTU of %d bytes again", p.Key, mtu)
		log.Info(msg, args...)
		fp.notice(Notice{Reason: NoticePathMTUWhole, Message: msg})
		return
	}
	said := fmt.Sprintf("echoes of %d bytes through %s are lost while small ones pass", mtu, fp.off.dev)
	if p.MTU > 0 {
		said = fmt.Sprintf("it passes on %d bytes at most (fragmentation needed, for an echo of %d bytes to its pods)", p.MTU, mtu)
	}
	msg := fmt.Sprintf("the path to peer %s (%s) carries less than this node's pods send, their MTU of %d bytes: %s; "+
		"the largest packets between the pods are lost (the peer's or a link's MTU is smaller: "+
		"the network config's Backend.MTU set to the smallest underlay MTU gives every node the same)",
		p.Key, p.Addr, mtu, said)
	args = append(args, "path_mtu", p.MTU)
	log.Warn(msg, args...)
	fp.notice(Notice{Warning: true, Reason: NoticePathMTUShort, Message: msg})
}

// notice tells the operator of n beyond the log: a Kubernetes event in Kubernetes mode.
func (fp *familyPath) notice(n Notice) { fp.cfg.events.Notice(n.Warning, n.Reason, n.Message) }

// probeSummary is the family's probe summary; false when probes are off. Readers may call it.
func (fp *familyPath) probeSummary() (probe.Summary, bool) {
	if fp.prober == nil {
		return probe.Summary{}, false
	}
	return fp.prober.Summary(), true
}

// unreachablePeers is what /status says of the family's unreachable peers; nil when probes
// are off. Readers may call it.
func (fp *familyPath) unreachablePeers() []status.Unreachable {
	if fp.prober == nil {
		return nil
	}
	var out []status.Unreachable
	for _, u := range fp.prober.Unreachable() {
		su := status.Unreachable{Key: u.Key, Address: u.Addr.String(), Since: u.Since, Error: u.LastErr}
		if fp.fam() == backend.IPv6 {
			su.Family = fp.fam().String()
		}
		out = append(out, su)
	}
	return out
}

// shortPaths is what /status says of the family's overlay peers whose path is short of the
// pods' MTU, and that MTU; false when their transport is not checked. Readers may call it.
func (fp *familyPath) shortPaths() ([]status.PathMTU, int, bool) {
	if fp.transport == nil {
		return nil, 0, false
	}
	var out []status.PathMTU
	for _, t := range fp.transport.Short() {
		ps := status.PathMTU{Key: t.Key, Address: t.Addr.String(), MTU: t.MTU}
		if fp.fam() == backend.IPv6 {
			ps.Family = fp.fam().String()
		}
		out = append(out, ps)
	}
	return out, fp.cfg.mtu, true
}

// unreachable is how many peers (halves of dual-stack peers apart) are unreachable now.
func (fs families) unreachable() int { return fs.overlaySummary().Unreachable }

// shortPaths is how many overlay peers (each family's half apart) have a path short of the
// pods' MTU now.
func (fs families) shortPaths() int {
	n := 0
	for _, fp := range fs {
		short, _, _ := fp.shortPaths()
		n += len(short)
	}
	return n
}

// overlaySummary is the families' probe summaries together.
func (fs families) overlaySummary() probe.Summary {
	var s probe.Summary
	for _, fp := range fs {
		f, ok := fp.probeSummary()
		if !ok {
			continue
		}
		s.Targets += f.Targets
		s.Answered += f.Answered
		s.Unreachable += f.Unreachable
		s.Period = max(s.Period, f.Period)
	}
	return s
}

// probeApplied tells the family's Prober, and through it its Transport, what an Apply
// programmed: every peer after a full one, the changed peers after an incremental one.
func (fp *familyPath) probeApplied(u backend.Update) {
	if fp.prober == nil {
		return
	}
	if u.Full {
		// Sized at once: at 20,000 peers, a slice grown by appending would leave behind
		// several times the megabytes it ends with, at every resync.
		peers := fp.set.State().Peers
		ts := make([]probe.Target, 0, peers.Len())
		for k, p := range peers.All() {
			ts = append(ts, probeTarget(k, p))
		}
		fp.prober.Set(ts)
		return
	}
	var put, removed []probe.Target
	for _, c := range u.Peers {
		if c.New.IsValid() {
			put = append(put, probeTarget(c.Key, c.New))
		} else {
			removed = append(removed, probe.Target{Key: c.Key})
		}
	}
	fp.prober.Update(put, removed)
}

// overlayStatus is what /status says of the probes.
func (fs families) overlayStatus() (*status.Overlay, []status.Unreachable) {
	var unreachable []status.Unreachable
	for _, fp := range fs {
		if _, ok := fp.probeSummary(); !ok {
			return nil, nil
		}
		unreachable = append(unreachable, fp.unreachablePeers()...)
	}
	s := fs.overlaySummary()
	o := &status.Overlay{Peers: s.Targets, Answered: s.Answered, Unreachable: s.Unreachable, Period: s.Period.String()}
	for _, fp := range fs {
		if short, mtu, ok := fp.shortPaths(); ok {
			o.MTU = mtu
			o.MTUShort = append(o.MTUShort, short...)
		}
	}
	return o, unreachable
}
