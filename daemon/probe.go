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
// pods' bridge (the CNI's IPAM hands addresses out from the start of the range).
func probeTarget(key string, p backend.Peer) probe.Target {
	a := p.VTEP()
	// A WireGuard peer's device holds its VTEP address, through the tunnel.
	if !p.Overlay() && p.WireGuard == nil {
		a = a.Next()
	}
	return probe.Target{Key: key, Addr: a, Behind: subnet.LastAddr(p.Subnet).Prev()}
}

// startProbes gives every family a Prober sending through pinger, and every family with an
// overlay device whose offload can be switched a Transport checking with checker (when not
// nil), run until ctx is done.
func (d *daemon) startProbes(ctx context.Context, wg *sync.WaitGroup, pinger probe.Pinger, checker probe.Checker) {
	cfg := probe.Config{Interval: d.cfg.ProbeInterval, PerInterval: d.cfg.ProbePeers}
	for _, st := range d.stacks {
		fam := st.fam()
		st.prober = probe.New(cfg, pinger, probe.Hooks{
			Result: func(outcome string, rtt time.Duration) {
				d.m.probes.WithLabelValues(probe.KindICMP, outcome).Inc()
				if outcome == probe.OutcomeOK {
					d.m.probeRTT.Observe(rtt.Seconds())
				}
			},
			Changed: func(t probe.Target, down bool, _ int) {
				var example []string
				if down {
					d.log.Warn("peer unreachable through the data plane", "family", fam, "peer", t.Key, "address", t.Addr)
					// The peer that went down is the example: listing the others would scan
					// every target at each change, O(peers²) when many go down at once.
					example = []string{t.Key}
				} else {
					d.log.Info("peer reachable again", "family", fam, "peer", t.Key, "address", t.Addr)
				}
				n := d.unreachable()
				d.m.unreachable.Set(float64(n))
				d.events.PeersUnreachable(n, example)
			},
		})
		wg.Go(func() { st.prober.Run(ctx) })
		if checker == nil || st.off == nil {
			continue
		}
		// A check every interval: a peer every few seconds at most, within the peers' ICMP
		// rate limits.
		// The echo of the pods' MTU: the largest packet they send, whatever the family.
		tcfg := probe.TransportConfig{Interval: d.cfg.ProbeInterval, Gap: max(3*d.cfg.ProbeInterval, 3*time.Second), MTU: d.mtu}
		st.transport = probe.NewTransport(tcfg, pinger, checker, probe.TransportHooks{
			Result: func(kind, outcome string) { d.m.probes.WithLabelValues(kind, outcome).Inc() },
			Changed: func(t probe.Target, broken bool) {
				d.transportChanged(ctx, st, t, broken)
			},
			MTUChanged: func(p probe.ShortPath, short bool) { d.pathMTUChanged(st, p, short) },
		})
		wg.Go(func() { st.transport.Run(ctx) })
	}
	d.health.update(func(h *health) { h.overlay, h.overlayStatus = d.overlaySummary, d.overlayStatus })
}

// Reasons of the Notices about the path MTU.
const (
	NoticePathMTUShort = "OverlayPathMTUTooSmall" // a peer's path carries less than the pods' MTU
	NoticePathMTUWhole = "OverlayPathMTURestored" // it carries the pods' MTU again
)

// pathMTUChanged tells the operator that the path to peer t carries less than the pods'
// MTU (short), or carries it again.
func (d *daemon) pathMTUChanged(st *stack, p probe.ShortPath, short bool) {
	n := 0
	for _, s := range d.stacks {
		if s.transport != nil {
			n += len(s.transport.Short())
		}
	}
	d.m.mtuShort.Set(float64(n))
	args := []any{"family", st.fam(), "peer", p.Key, "address", p.Addr, "mtu", d.mtu}
	if !short {
		msg := fmt.Sprintf("the path to peer %s carries the pods' MTU of %d bytes again", p.Key, d.mtu)
		d.log.Info(msg, args...)
		d.notice(Notice{Reason: NoticePathMTUWhole, Message: msg})
		return
	}
	said := fmt.Sprintf("echoes of %d bytes through %s are lost while small ones pass", d.mtu, st.off.dev)
	if p.MTU > 0 {
		said = fmt.Sprintf("it passes on %d bytes at most (fragmentation needed, for an echo of %d bytes to its pods)", p.MTU, d.mtu)
	}
	msg := fmt.Sprintf("the path to peer %s (%s) carries less than this node's pods send, their MTU of %d bytes: %s; "+
		"the largest packets between the pods are lost (the peer's or a link's MTU is smaller: "+
		"the network config's Backend.MTU set to the smallest underlay MTU gives every node the same)",
		p.Key, p.Addr, d.mtu, said)
	args = append(args, "path_mtu", p.MTU)
	d.log.Warn(msg, args...)
	d.notice(Notice{Warning: true, Reason: NoticePathMTUShort, Message: msg})
}

// unreachable is how many peers (halves of dual-stack peers apart) are unreachable now.
func (d *daemon) unreachable() int {
	n := 0
	for _, st := range d.stacks {
		if st.prober != nil {
			n += st.prober.Summary().Unreachable
		}
	}
	return n
}

// overlaySummary is the families' probe summaries together.
func (d *daemon) overlaySummary() probe.Summary {
	var s probe.Summary
	for _, st := range d.stacks {
		if st.prober == nil {
			continue
		}
		f := st.prober.Summary()
		s.Targets += f.Targets
		s.Answered += f.Answered
		s.Unreachable += f.Unreachable
		s.Period = max(s.Period, f.Period)
	}
	return s
}

// probeApplied tells the family's Prober what an Apply programmed, and its Transport what
// of it goes through the overlay: every peer after a full one, the changed peers after an
// incremental one.
func (st *stack) probeApplied(u backend.Update) {
	if st.prober == nil {
		return
	}
	if u.Full {
		// Sized at once: at 20,000 peers, slices grown by appending would leave behind
		// several times the megabytes they end with, at every resync.
		peers := st.set.State().Peers
		ts := make([]probe.Target, 0, peers.Len())
		through := make([]bool, 0, peers.Len()) // by ts: the peer is reached through the overlay
		for k, p := range peers.All() {
			ts = append(ts, probeTarget(k, p))
			through = append(through, p.Overlay())
		}
		st.prober.Set(ts)
		if st.transport != nil {
			// In place: the Prober keeps no slice it is given.
			overlay := ts[:0]
			for i, t := range ts {
				if through[i] {
					overlay = append(overlay, t)
				}
			}
			st.transport.Set(overlay)
		}
		return
	}
	var put, removed, overlay, notOverlay []probe.Target
	for _, c := range u.Peers {
		t := probe.Target{Key: c.Key}
		if c.New.IsValid() {
			t = probeTarget(c.Key, c.New)
			put = append(put, t)
		} else {
			removed = append(removed, t)
		}
		if c.New.Overlay() {
			overlay = append(overlay, t)
		} else {
			notOverlay = append(notOverlay, t)
		}
	}
	st.prober.Update(put, removed)
	if st.transport != nil {
		st.transport.Update(overlay, notOverlay)
	}
}

// overlayStatus is what /status says of the probes.
func (d *daemon) overlayStatus() (*status.Overlay, []status.Unreachable) {
	var unreachable []status.Unreachable
	for _, st := range d.stacks {
		if st.prober == nil {
			return nil, nil
		}
		for _, u := range st.prober.Unreachable() {
			su := status.Unreachable{Key: u.Key, Address: u.Addr.String(), Since: u.Since, Error: u.LastErr}
			if st.fam() == backend.IPv6 {
				su.Family = st.fam().String()
			}
			unreachable = append(unreachable, su)
		}
	}
	s := d.overlaySummary()
	o := &status.Overlay{Peers: s.Targets, Answered: s.Answered, Unreachable: s.Unreachable, Period: s.Period.String()}
	for _, st := range d.stacks {
		if st.transport == nil {
			continue
		}
		o.MTU = d.mtu
		for _, t := range st.transport.Short() {
			ps := status.PathMTU{Key: t.Key, Address: t.Addr.String(), MTU: t.MTU}
			if st.fam() == backend.IPv6 {
				ps.Family = st.fam().String()
			}
			o.MTUShort = append(o.MTUShort, ps)
		}
	}
	return o, unreachable
}
