// Package probe checks that the data plane weft programmed carries packets to each peer: it
// sends an echo through it (to a VXLAN peer's VTEP address, through the tunnel; to a routed
// peer's subnet gateway) for a bounded number of peers each interval, rotating over them so
// that every peer is probed within a known period however large the cluster, and keeps
// which peers are unreachable and since when.
//
// The cost per node is constant: at most PerInterval probes each Interval. A peer that fails
// a probe is probed again each interval (within half the budget) until it answers or counts
// as unreachable after Failures lost probes in a row, so that an outage shows within seconds
// while the rotation covers the rest.
//
// A Transport checks, sparingly, that TCP and UDP get through too (to a closed port of the
// peer, which needs nothing running there): a peer that answers echoes but neither TCP nor
// UDP shows the signature of broken checksum offload on the way.
package probe

import (
	"context"
	"errors"
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// ErrLost is what a Pinger returns when no answer came in time.
var ErrLost = errors.New("no answer")

// Pinger sends one echo request to dst and waits for its answer until ctx is done: it returns
// the round trip, ErrLost (wrapped) when no answer came, or another error when the request
// could not be sent. size is the request's whole length as an IP packet: 0 for a small one;
// a sized one must arrive whole or not at all (no fragments), and fails to be sent where
// that cannot be had. It is called from several goroutines at once.
type Pinger interface {
	Ping(ctx context.Context, dst netip.Addr, size int) (time.Duration, error)
}

// Target is a peer to probe: its lease key and the address that answers through the data
// plane.
type Target struct {
	Key  string
	Addr netip.Addr
	// Behind is an address in the peer's subnet that the peer forwards to its pods' bridge
	// (no pod need hold it), for the Transport's echoes of the pods' MTU; the Prober
	// disregards it.
	Behind netip.Addr
}

// Config tunes a Prober; zero fields take the defaults.
type Config struct {
	Interval    time.Duration // between rounds; default 1 s
	PerInterval int           // probes per round at most; default 4
	Timeout     time.Duration // for an answer; default 1 s
	Failures    int           // lost probes in a row that make a peer unreachable; default 3
}

func (c Config) withDefaults() Config {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.PerInterval <= 0 {
		c.PerInterval = 4
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Failures <= 0 {
		c.Failures = 3
	}
	return c
}

// Hooks are told of what the Prober sees; each may be nil. They are called from the
// Prober's goroutines, not under its lock.
type Hooks struct {
	// Result: one probe's outcome ("ok", "lost", "error") and, when ok, its round trip.
	Result func(outcome string, rtt time.Duration)
	// Changed: a peer became unreachable (down) or answers again (!down), and how many are
	// unreachable now.
	Changed func(t Target, down bool, unreachable int)
}

// Unreachable is a peer that has not answered Failures probes in a row.
type Unreachable struct {
	Target
	Since   time.Time // when its first lost probe was sent
	LastErr string
}

// Summary is the Prober's view at one moment.
type Summary struct {
	Targets     int // peers to probe
	Answered    int // of those, peers whose last probe was answered
	Unreachable int
	// Period bounds the time it takes to probe every peer once: the peers over the probes a
	// round gives to the rotation, times the interval.
	Period time.Duration
}

// Isolated reports whether this node reaches none of its peers while they are several: its
// own side of the data plane is the likely fault (a node whose every peer is down has other
// symptoms too).
func (s Summary) Isolated() bool { return s.Targets >= 2 && s.Answered == 0 && s.Unreachable >= 2 }

// peer is what the Prober keeps of one target.
type peer struct {
	addr     netip.Addr
	fails    int       // lost probes in a row
	since    time.Time // of the first of them
	lastErr  string
	probed   bool // a probe's outcome is known
	answered bool // the last probe was answered
	down     bool // fails reached Failures
	inFlight bool
}

// suspect reports whether the peer is probed out of turn: never yet, or since a lost probe.
func (pe *peer) suspect() bool { return !pe.probed || pe.fails > 0 }

// Prober probes peers; its methods are safe for concurrent use.
type Prober struct {
	cfg    Config
	pinger Pinger
	hooks  Hooks
	now    func() time.Time

	mu       sync.Mutex
	peers    map[string]*peer
	rot      rotation
	suspects []string // keys with lost probes, probed again each round, oldest first
	answered int      // peers whose last probe was answered
	down     int      // peers that are unreachable
}

// New returns a Prober that sends its probes with pinger.
func New(cfg Config, pinger Pinger, hooks Hooks) *Prober {
	return &Prober{cfg: cfg.withDefaults(), pinger: pinger, hooks: hooks, now: time.Now, peers: map[string]*peer{}}
}

// Set makes the targets exactly ts (a full resync of the data plane).
func (p *Prober) Set(ts []Target) {
	keep := make(map[string]bool, len(ts))
	for _, t := range ts {
		keep[t.Key] = true
	}
	var gone []Target
	p.mu.Lock()
	for k := range p.peers {
		if !keep[k] {
			gone = append(gone, Target{Key: k})
		}
	}
	p.mu.Unlock()
	p.Update(ts, gone)
}

// Update adds or changes the targets in put and removes those in removed (only their keys
// count): the peers an incremental convergence changed. A target whose address changed starts
// afresh.
func (p *Prober) Update(put, removed []Target) {
	var changed []func()
	p.mu.Lock()
	for _, t := range removed {
		if pe, ok := p.peers[t.Key]; ok {
			changed = append(changed, p.forgetLocked(t.Key, pe)...)
		}
	}
	for _, t := range put {
		if pe, ok := p.peers[t.Key]; ok {
			if pe.addr == t.Addr {
				continue
			}
			changed = append(changed, p.forgetLocked(t.Key, pe)...)
		}
		p.peers[t.Key] = &peer{addr: t.Addr}
		// A new peer is probed soon rather than when the rotation comes round to it.
		p.suspects = append(p.suspects, t.Key)
	}
	p.mu.Unlock()
	for _, f := range changed {
		f()
	}
}

// forgetLocked drops a peer, returning the hook calls its going makes.
func (p *Prober) forgetLocked(k string, pe *peer) []func() {
	delete(p.peers, k)
	if pe.answered {
		p.answered--
	}
	if !pe.down {
		return nil
	}
	p.down--
	t, n := Target{Key: k, Addr: pe.addr}, p.down
	if p.hooks.Changed == nil {
		return nil
	}
	return []func(){func() { p.hooks.Changed(t, false, n) }}
}

// Summary returns the Prober's view now.
func (p *Prober) Summary() Summary {
	p.mu.Lock()
	defer p.mu.Unlock()
	rot := max(p.cfg.PerInterval-p.cfg.PerInterval/2, 1)
	rounds := (len(p.peers) + rot - 1) / rot
	return Summary{Targets: len(p.peers), Answered: p.answered, Unreachable: p.down,
		Period: time.Duration(max(rounds, 1)) * p.cfg.Interval}
}

// Unreachable lists the unreachable peers, by key.
func (p *Prober) Unreachable() []Unreachable {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Unreachable
	for k, pe := range p.peers {
		if pe.down {
			out = append(out, Unreachable{Target: Target{Key: k, Addr: pe.addr}, Since: pe.since, LastErr: pe.lastErr})
		}
	}
	slices.SortFunc(out, func(a, b Unreachable) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// rotation walks the keys of the peers in order, through a snapshot of them taken again when
// it runs out, so that every peer there at the start of a pass comes up within it.
type rotation struct {
	cycle  []string
	cursor int // next index into cycle
}

// next is the next key, from a new snapshot of keys when the last ran out; false when there
// are none.
func (r *rotation) next(keys iter.Seq[string]) (string, bool) {
	if r.cursor >= len(r.cycle) {
		r.cycle = slices.AppendSeq(r.cycle[:0], keys)
		slices.Sort(r.cycle)
		r.cursor = 0
		if len(r.cycle) == 0 {
			return "", false
		}
	}
	r.cursor++
	return r.cycle[r.cursor-1], true
}

// Run probes until ctx is done: a round every Interval.
func (p *Prober) Run(ctx context.Context) {
	tick := time.NewTicker(p.cfg.Interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for _, t := range p.round() {
			wg.Go(func() { p.probe(ctx, t) })
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// round picks the targets of one round: suspects first, within half the budget, then the
// rotation; none twice, none still waiting for its last answer.
func (p *Prober) round() []Target {
	p.mu.Lock()
	defer p.mu.Unlock()
	budget := p.cfg.PerInterval
	var out []Target
	picked := map[string]bool{}
	take := func(k string) bool {
		pe, ok := p.peers[k]
		if !ok || picked[k] || pe.inFlight {
			return false
		}
		picked[k] = true
		pe.inFlight = true
		out = append(out, Target{Key: k, Addr: pe.addr})
		return true
	}
	// Suspects (new peers, peers with lost probes) within half the budget; those probed
	// go to the back of the queue, those cleared leave it.
	keep, taken := p.suspects[:0], []string(nil)
	for _, k := range p.suspects {
		pe, ok := p.peers[k]
		if !ok || !pe.suspect() || picked[k] {
			continue
		}
		if len(taken) < max(budget/2, 1) && take(k) {
			taken = append(taken, k)
			continue
		}
		picked[k] = true // kept once
		keep = append(keep, k)
	}
	p.suspects = append(keep, taken...)
	// The rotation: through a snapshot of the keys, taken again when it runs out, so that
	// every peer there at its start is probed within Summary.Period.
	for tries := 0; len(out) < budget && tries <= len(p.peers); tries++ {
		k, ok := p.rot.next(maps.Keys(p.peers))
		if !ok {
			break
		}
		take(k)
	}
	return out
}

// probe sends one probe and notes its outcome.
func (p *Prober) probe(ctx context.Context, t Target) {
	sent := p.now()
	pctx, cancel := context.WithTimeout(ctx, p.cfg.Timeout)
	rtt, err := p.pinger.Ping(pctx, t.Addr, 0)
	cancel()
	if ctx.Err() != nil {
		p.mu.Lock()
		if pe, ok := p.peers[t.Key]; ok {
			pe.inFlight = false
		}
		p.mu.Unlock()
		return
	}
	if p.hooks.Result != nil {
		p.hooks.Result(outcomeOf(err), rtt)
	}
	p.mu.Lock()
	pe, ok := p.peers[t.Key]
	if !ok || pe.addr != t.Addr {
		p.mu.Unlock()
		return // gone or changed meanwhile
	}
	pe.inFlight, pe.probed = false, true
	wasAnswered, wasDown := pe.answered, pe.down
	if err == nil {
		pe.fails, pe.lastErr, pe.answered, pe.down = 0, "", true, false
	} else {
		if pe.fails == 0 {
			pe.since = sent
			p.suspects = append(p.suspects, t.Key) // probed again each round until it answers
		}
		pe.fails++
		pe.lastErr, pe.answered = err.Error(), false
		pe.down = pe.fails >= p.cfg.Failures
	}
	if pe.answered != wasAnswered {
		if pe.answered {
			p.answered++
		} else {
			p.answered--
		}
	}
	var changed func()
	if pe.down != wasDown {
		if pe.down {
			p.down++
		} else {
			p.down--
		}
		down, n := pe.down, p.down
		if p.hooks.Changed != nil {
			changed = func() { p.hooks.Changed(t, down, n) }
		}
	}
	p.mu.Unlock()
	if changed != nil {
		changed()
	}
}
