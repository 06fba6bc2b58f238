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

// startProbes gives every family a Prober sending through pinger, run until ctx is done.
func (d *daemon) startProbes(ctx context.Context, wg *sync.WaitGroup, pinger probe.Pinger) {
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

// probeApplied tells the family's Prober what an Apply programmed: every peer after a full
// one, the changed peers after an incremental one. The caller holds d.mu.
func (st *stack) probeApplied(u backend.Update) {
	if st.prober == nil {
		return
	}
	if u.Full {
		var ts []probe.Target
		for k, p := range st.set.State().Peers.All() {
			ts = append(ts, probeTarget(k, p))
		}
		st.prober.Set(ts)
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
	st.prober.Update(put, removed)
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
