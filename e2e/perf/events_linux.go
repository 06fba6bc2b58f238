package perf

import (
	"context"
	"fmt"
	"net/netip"
	"time"
)

// events is what the event-latency measure found.
type events struct {
	p50, p99 Value
	timeouts int
	// floor50 and floor99 are the same percentiles of etcd's delivery of the puts to a
	// watcher in the harness: the part of the latency that is not the daemon's.
	floor50, floor99 Value
}

// eventLatency puts the leases of cfg.Events new peers, from the first on, one every
// EventInterval whatever the daemon does meanwhile, and measures from each put's
// acknowledgement to its route in the kernel. A route not seen within EventTimeout of its put
// is a timeout.
// arrived, if not nil, says when the datastore delivered put i to a watcher in the harness:
// the same percentiles of that are the floor.
func (r *daemonRun) eventLatency(ctx context.Context, put func(ctx context.Context, i int) error, first int, arrived func(i int) (time.Time, bool)) (events, error) {
	cfg := r.b.cfg
	type sent struct {
		i   int
		sn  netip.Prefix
		ack time.Time
	}
	puts := make([]sent, 0, cfg.Events)
	tick := time.NewTicker(cfg.EventInterval)
	defer tick.Stop()
	for k := range cfg.Events {
		i := first + k
		if err := put(ctx, i); err != nil {
			return events{}, fmt.Errorf("event %d: %w", k+1, err)
		}
		sn, _ := peer(i)
		puts = append(puts, sent{i: i, sn: sn, ack: time.Now()})
		if k == cfg.Events-1 {
			break
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return events{}, ctx.Err()
		}
	}

	var lat []time.Duration
	timeouts := 0
	done := make([]bool, len(puts))
	left := len(puts)
	timer := time.NewTimer(statusPoll)
	defer timer.Stop()
	for left > 0 {
		now := time.Now()
		for k, p := range puts {
			if done[k] {
				continue
			}
			seen, ok := r.watch.SeenAt(p.sn)
			switch {
			case ok && seen.Sub(p.ack) <= cfg.EventTimeout:
				// A route may be seen before the put's acknowledgement reaches the
				// harness: that is no latency at all.
				lat = append(lat, max(0, seen.Sub(p.ack)))
			case ok || now.Sub(p.ack) > cfg.EventTimeout:
				timeouts++
			default:
				continue
			}
			done[k] = true
			left--
		}
		if left == 0 {
			break
		}
		if !r.node.Running() {
			return events{}, fmt.Errorf("%s exited: %v", r.daemon, r.node.ExitState())
		}
		timer.Reset(statusPoll)
		select {
		case <-r.watch.Changed():
		case <-timer.C:
		case <-ctx.Done():
			return events{}, ctx.Err()
		}
	}
	ev := events{
		p50:      percentile(lat, timeouts, cfg.EventTimeout, 0.50),
		p99:      percentile(lat, timeouts, cfg.EventTimeout, 0.99),
		timeouts: timeouts,
		floor50:  missing("not measured"),
		floor99:  missing("not measured"),
	}
	if arrived != nil {
		var floor []time.Duration
		lost := 0
		for _, p := range puts {
			// The harness's own watch may lag the daemon's: wait for it, as long as an event
			// may take.
			at, ok := arrived(p.i)
			for !ok && time.Since(p.ack) < cfg.EventTimeout && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
				at, ok = arrived(p.i)
			}
			if ok {
				floor = append(floor, max(0, at.Sub(p.ack)))
			} else {
				lost++
			}
		}
		ev.floor50 = percentile(floor, lost, cfg.EventTimeout, 0.50)
		ev.floor99 = percentile(floor, lost, cfg.EventTimeout, 0.99)
	}
	r.b.log.Info("event latency", "daemon", r.daemon, "events", len(puts), "p50", ev.p50.Format(Duration),
		"p99", ev.p99.Format(Duration), "timeouts", timeouts,
		"etcd_delivery_p50", ev.floor50.Format(Duration), "etcd_delivery_p99", ev.floor99.Format(Duration))
	return ev, nil
}

// bulkJoin puts the leases of peers from..to as fast as the datastore takes them and
// measures from the first put until the last of their routes is in the kernel.
func (r *daemonRun) bulkJoin(ctx context.Context, put func(ctx context.Context, from, to int) error, from, to int) Value {
	r.watch.Expect(peerSet(from, to))
	start := time.Now()
	if err := put(ctx, from, to); err != nil {
		r.b.fail("%s: bulk join: %v", r.daemon, err)
		return missing("failed")
	}
	putDone := time.Since(start)
	deadline := start.Add(r.b.cfg.StartTimeout)
	timer := time.NewTimer(statusPoll)
	defer timer.Stop()
	for {
		st := r.watch.Status()
		switch {
		case !st.all.IsZero():
			v := seconds(st.all.Sub(start))
			r.b.log.Info("bulk join", "daemon", r.daemon, "leases", to-from+1, "puts", putDone.Round(time.Millisecond),
				"all routes", v.Format(Duration))
			return v
		case st.err != nil:
			r.b.fail("%s: bulk join: route watch: %v", r.daemon, st.err)
			return missing("failed")
		case !r.node.Running():
			r.b.fail("%s: bulk join: it exited: %v", r.daemon, r.node.ExitState())
			return missing("failed")
		case time.Now().After(deadline) || ctx.Err() != nil:
			r.b.fail("%s: bulk join: %d routes of %d after %v", r.daemon, st.have, st.want, r.b.cfg.StartTimeout)
			return timedOut(time.Since(start))
		}
		timer.Reset(statusPoll)
		select {
		case <-r.watch.Changed():
		case <-timer.C:
		}
	}
}
