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
	// Transport: the Prober's Transport checks the peer's TCP and UDP too (its packets go
	// through the device whose offload the Transport watches).
	Transport bool
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
	// Result: one probe's outcome (OutcomeOK, OutcomeLost, OutcomeError) and, when ok, its
	// round trip.
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

// record is what the table keeps of every target beside its key: its addresses, what the
// Prober keeps of it (peer) and what the Transport does (tpeer and last). One table serves
// both, so that a peer costs one slot of the index and one record of 72 bytes on 64-bit
// platforms, not one of each in two tables (the key, the index's slot and the address again).
type record struct {
	addr, behind netip.Addr // the target's
	last         int64      // the start of the Transport's last check (Unix nanoseconds)
	p            peer
	t            tpeer
}

// target is the Target the peer k was given.
func (r *record) target(k string) Target {
	return Target{Key: k, Addr: r.addr, Behind: r.behind, Transport: r.t.checked}
}

// peer is what the Prober keeps of every target besides its addresses.
type peer struct {
	probed   bool // a probe's outcome is known
	answered bool // the last probe was answered
	down     bool // its lost probes reached Failures
	failing  bool // its last probe was lost: it has an entry in Prober.lost
	inFlight bool
	queued   bool // in Prober.suspects (once: a round drops the repeats)
}

// suspect reports whether the peer is probed out of turn: never yet, or since a lost probe.
func (pe *peer) suspect() bool { return !pe.probed || pe.failing }

// lost is what the Prober keeps of a peer whose last probe was lost, besides its record.
type lost struct {
	fails   int       // lost probes in a row
	since   time.Time // of the first of them
	lastErr string
}

// Prober probes peers; its methods are safe for concurrent use.
//
// Its peers are a table of small records (see table), which its Transport shares: what it
// keeps of every peer is a slot in the table's index and a record with the key; the rotation
// walks the table's slots, with no copy of the keys. What lost probes leave to report (since
// when, the last error) is kept aside, in lost: few peers have lost their last probe.
type Prober struct {
	cfg    Config
	pinger Pinger
	hooks  Hooks
	now    func() time.Time

	mu       sync.Mutex // guards what follows, and the Transport's state
	peers    table[record]
	lost     map[string]*lost // of the peers whose last probe was lost (failing)
	suspects []string         // keys probed out of turn (new peers, lost probes), oldest first
	answered int              // peers whose last probe was answered
	down     int              // peers that are unreachable
	checked  int              // peers whose Target.Transport holds
	tr       *Transport       // the Transport made by NewTransport; nil before
}

// New returns a Prober that sends its probes with pinger.
func New(cfg Config, pinger Pinger, hooks Hooks) *Prober {
	p := &Prober{cfg: cfg.withDefaults(), pinger: pinger, hooks: hooks, now: time.Now, lost: map[string]*lost{}}
	p.peers.init()
	return p
}

// Set makes the targets exactly ts (a full resync of the data plane).
func (p *Prober) Set(ts []Target) {
	// Most often (the first Set, at start-up, and every resync after) ts holds every peer
	// the table holds: then nothing is removed, and no set of tens of thousands of keys is
	// built to find that out.
	p.mu.Lock()
	held := 0
	for _, t := range ts {
		if p.peers.get(t.Key) != nil {
			held++
		}
	}
	all := held == p.peers.len()
	p.mu.Unlock()
	if all {
		p.Update(ts, nil)
		return
	}
	keep := make(map[string]bool, len(ts))
	for _, t := range ts {
		keep[t.Key] = true
	}
	var gone []Target
	p.mu.Lock()
	for k := range p.peers.all() {
		if !keep[k] {
			gone = append(gone, Target{Key: k})
		}
	}
	p.mu.Unlock()
	p.Update(ts, gone)
}

// Update adds or changes the targets in put and removes those in removed (only their keys
// count): the peers an incremental convergence changed. A target whose address changed starts
// afresh; so does its Transport's check when its Behind or Transport changed. It costs what
// it changes, however many peers there are.
func (p *Prober) Update(put, removed []Target) {
	var changed []func()
	p.mu.Lock()
	for _, t := range removed {
		if r, ok := p.peers.remove(t.Key); ok {
			changed = append(changed, p.forgetLocked(t.Key, &r)...)
			p.uncheckLocked(t.Key, &r)
		}
	}
	p.peers.reserveFor(put)
	for _, t := range put {
		r, added := p.peers.put(t.Key)
		moved := added || r.addr != t.Addr
		if !moved && r.behind == t.Behind && r.t.checked == t.Transport {
			continue
		}
		if !added {
			p.uncheckLocked(t.Key, r)
			if moved {
				changed = append(changed, p.forgetLocked(t.Key, r)...)
			}
		}
		r.addr, r.behind = t.Addr, t.Behind
		r.last, r.t = 0, tpeer{checked: t.Transport}
		if t.Transport {
			p.checked++
		}
		if moved {
			r.p = peer{}
			// A new peer is probed soon rather than when the rotation comes round to it,
			// while few wait so. Of many new at once (a start, a resync that finds the
			// cluster grown) the queue would take no more of them a round than the rotation
			// does, and would keep their keys meanwhile: at 20,000 peers, 16 bytes each for
			// over an hour.
			if len(p.suspects) < p.newQueued() {
				p.queueLocked(t.Key, r)
			}
		}
	}
	p.mu.Unlock()
	for _, f := range changed {
		f()
	}
}

// newQueued is how many suspects may be waiting for a new peer to join them: as many as the
// rounds take out of turn in 16 rounds.
func (p *Prober) newQueued() int { return 16 * max(p.cfg.PerInterval/2, 1) }

// queueLocked puts the peer k in the queue of suspects, unless it is there.
func (p *Prober) queueLocked(k string, r *record) {
	if !r.p.queued {
		r.p.queued = true
		p.suspects = append(p.suspects, k)
	}
}

// forgetLocked forgets what was seen of the peer k, which is leaving or starting afresh,
// returning the hook calls this makes.
func (p *Prober) forgetLocked(k string, r *record) []func() {
	delete(p.lost, k)
	if r.p.answered {
		p.answered--
	}
	if !r.p.down {
		return nil
	}
	p.down--
	t, n := Target{Key: k, Addr: r.addr}, p.down
	if p.hooks.Changed == nil {
		return nil
	}
	return []func(){func() { p.hooks.Changed(t, false, n) }}
}

// uncheckLocked takes the peer k, leaving or starting afresh, out of the Transport's checks:
// its record's tpeer is the caller's to reset.
func (p *Prober) uncheckLocked(k string, r *record) {
	if r.t.checked {
		p.checked--
	}
	if p.tr != nil {
		delete(p.tr.suspects, k)
	}
}

// Summary returns the Prober's view now.
func (p *Prober) Summary() Summary {
	p.mu.Lock()
	defer p.mu.Unlock()
	rot := max(p.cfg.PerInterval-p.cfg.PerInterval/2, 1)
	rounds := (p.peers.len() + rot - 1) / rot
	return Summary{Targets: p.peers.len(), Answered: p.answered, Unreachable: p.down,
		Period: time.Duration(max(rounds, 1)) * p.cfg.Interval}
}

// Unreachable lists the unreachable peers, by key.
func (p *Prober) Unreachable() []Unreachable {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Unreachable
	for k, l := range p.lost { // an unreachable peer has lost its last probes
		if r := p.peers.get(k); r != nil && r.p.down {
			out = append(out, Unreachable{Target: Target{Key: k, Addr: r.addr}, Since: l.since, LastErr: l.lastErr})
		}
	}
	slices.SortFunc(out, func(a, b Unreachable) int { return strings.Compare(a.Key, b.Key) })
	return out
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
	// In flight, a peer is not taken again (by the rotation after the suspects, say).
	take := func(k string, r *record) bool {
		if r.p.inFlight {
			return false
		}
		r.p.inFlight = true
		out = append(out, Target{Key: k, Addr: r.addr})
		return true
	}
	// Suspects (new peers, peers with lost probes) within half the budget; those probed
	// go to the back of the queue, those cleared leave it, and so do the repeats of a peer
	// (gone and back, or changed, while queued): the first seen unmarks it.
	keep, taken := p.suspects[:0], []string(nil)
	for _, k := range p.suspects {
		r := p.peers.get(k)
		if r == nil || !r.p.queued {
			continue
		}
		r.p.queued = false
		if !r.p.suspect() {
			continue
		}
		if len(taken) < max(budget/2, 1) && take(k, r) {
			taken = append(taken, k)
			continue
		}
		keep = append(keep, k)
	}
	clear(p.suspects[len(keep):]) // lets go of the keys dropped
	p.suspects = append(keep, taken...)
	if n := len(p.suspects); cap(p.suspects) > 64 && 4*n < cap(p.suspects) {
		// Drained after many peers failed at once: the room they took goes.
		p.suspects = slices.Clone(p.suspects)
	}
	for _, k := range p.suspects {
		p.peers.get(k).p.queued = true
	}
	// The rotation: through the table's peers in turn, so that every peer there at the
	// start of a pass is probed within Summary.Period.
	for tries := 0; len(out) < budget && tries <= p.peers.len(); tries++ {
		k, r, ok := p.peers.rotate(rotProber, nil)
		if !ok {
			break
		}
		take(k, r)
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
		if r := p.peers.get(t.Key); r != nil {
			r.p.inFlight = false
		}
		p.mu.Unlock()
		return
	}
	if p.hooks.Result != nil {
		p.hooks.Result(outcomeOf(err), rtt)
	}
	p.mu.Lock()
	r := p.peers.get(t.Key)
	if r == nil || r.addr != t.Addr {
		p.mu.Unlock()
		return // gone or changed meanwhile
	}
	pe := &r.p
	pe.inFlight, pe.probed = false, true
	wasAnswered, wasDown := pe.answered, pe.down
	if err == nil {
		delete(p.lost, t.Key)
		pe.failing, pe.answered, pe.down = false, true, false
	} else {
		l := p.lost[t.Key]
		if l == nil {
			l = &lost{since: sent}
			p.lost[t.Key] = l
			p.queueLocked(t.Key, r) // probed again each round until it answers
		}
		l.fails++
		l.lastErr = err.Error()
		pe.failing, pe.answered, pe.down = true, false, l.fails >= p.cfg.Failures
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
