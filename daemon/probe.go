package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/status"
)

// probeTarget is where a peer answers through what this node programmed for it: its VTEP
// address through the tunnel, or, routed, its subnet's gateway (the first address after the
// subnet's own: the CNI bridge's on the peer).
func probeTarget(key string, p backend.Peer) probe.Target {
	a := p.VTEP()
	if !p.Overlay() {
		a = a.Next()
	}
	return probe.Target{Key: key, Addr: a}
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
				d.m.probes.WithLabelValues("icmp", outcome).Inc()
				if outcome == "ok" {
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
		tcfg := probe.TransportConfig{Interval: d.cfg.ProbeInterval, Gap: max(3*d.cfg.ProbeInterval, 3*time.Second)}
		st.transport = probe.NewTransport(tcfg, pinger, checker, probe.TransportHooks{
			Result: func(kind, outcome string) { d.m.probes.WithLabelValues(kind, outcome).Inc() },
			Changed: func(t probe.Target, broken bool) {
				d.transportChanged(ctx, st, t, broken)
			},
		})
		wg.Go(func() { st.transport.Run(ctx) })
	}
	d.health.update(func(h *health) { h.overlay, h.overlayStatus = d.overlaySummary, d.overlayStatus })
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
// incremental one. The caller holds d.mu.
func (st *stack) probeApplied(u backend.Update) {
	if st.prober == nil {
		return
	}
	if u.Full {
		var ts, overlay []probe.Target
		for k, p := range st.set.State().Peers.All() {
			ts = append(ts, probeTarget(k, p))
			if p.Overlay() {
				overlay = append(overlay, probeTarget(k, p))
			}
		}
		st.prober.Set(ts)
		if st.transport != nil {
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
	return &status.Overlay{Peers: s.Targets, Answered: s.Answered, Unreachable: s.Unreachable, Period: s.Period.String()}, unreachable
}
