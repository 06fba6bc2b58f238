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

// peer is what the Prober keeps of every target: 48 bytes on 64-bit platforms, the key (whose
// bytes are the caller's) and the address, the flags in what would be padding.
type peer struct {
	key      string
	addr     netip.Addr
	probed   bool // a probe's outcome is known
	answered bool // the last probe was answered
	down     bool // its lost probes reached Failures
	failing  bool // its last probe was lost: it has an entry in Prober.lost
	inFlight bool
	picked   bool // by the round being picked (to probe, or kept a suspect); it clears it
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
// Its peers are a slice of records sorted by key, not a map, for thousands of peers take
// memory: a record (48 bytes) each, where a map of pointers to records took a slot in the
// map (a third of it empty on average), a record of their own and, for the rotation, a copy
// of the keys. A peer is found by binary search; the rotation walks the slice in order from
// the key it came to last, with no snapshot of the keys. Adding or removing peers moves part
// of the slice, once per Update however many peers it changes. A round marks the peers it
// picks in their records, not in a set of keys (the suspects may be every peer). What lost
// probes leave to report (since when, the last error) is kept aside, in lost: few peers have
// lost their last probe.
type Prober struct {
	cfg    Config
	pinger Pinger
	hooks  Hooks
	now    func() time.Time

	mu       sync.Mutex
	peers    []peer           // sorted by key
	lost     map[string]*lost // of the peers whose last probe was lost (failing)
	rotKey   string           // the key the rotation came to last, when rotOn
	rotOn    bool             // the rotation has begun: it resumes after rotKey
	suspects []string         // keys with lost probes, probed again each round, oldest first
	answered int              // peers whose last probe was answered
	down     int              // peers that are unreachable
}

// New returns a Prober that sends its probes with pinger.
func New(cfg Config, pinger Pinger, hooks Hooks) *Prober {
	return &Prober{cfg: cfg.withDefaults(), pinger: pinger, hooks: hooks, now: time.Now, lost: map[string]*lost{}}
}

// findLocked returns the index of the peer with key k, or where it would go, and whether it is
// there.
func (p *Prober) findLocked(k string) (int, bool) {
	return slices.BinarySearchFunc(p.peers, k, func(pe peer, k string) int { return strings.Compare(pe.key, k) })
}

// peerLocked returns the peer with key k, or nil; the pointer is good until the peers change.
func (p *Prober) peerLocked(k string) *peer {
	if i, ok := p.findLocked(k); ok {
		return &p.peers[i]
	}
	return nil
}

// Set makes the targets exactly ts (a full resync of the data plane).
func (p *Prober) Set(ts []Target) {
	keep := make(map[string]bool, len(ts))
	for _, t := range ts {
		keep[t.Key] = true
	}
	var gone []Target
	p.mu.Lock()
	for _, pe := range p.peers {
		if !keep[pe.key] {
			gone = append(gone, Target{Key: pe.key})
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
	// The removed peers leave the slice in one pass, before the puts, which may bring them
	// back.
	var drop []int
	for _, t := range removed {
		if i, ok := p.findLocked(t.Key); ok {
			changed = append(changed, p.forgetLocked(&p.peers[i])...)
			drop = append(drop, i)
		}
	}
	p.peers = deleteAt(p.peers, drop)
	// A changed peer starts afresh where it is; the new ones join the slice together.
	var add []peer
	for _, t := range put {
		if pe := p.peerLocked(t.Key); pe != nil {
			if pe.addr == t.Addr {
				continue
			}
			changed = append(changed, p.forgetLocked(pe)...)
			*pe = peer{key: t.Key, addr: t.Addr}
		} else {
			add = append(add, peer{key: t.Key, addr: t.Addr})
		}
		// A new peer is probed soon rather than when the rotation comes round to it.
		p.suspects = append(p.suspects, t.Key)
	}
	p.peers = merge(p.peers, add)
	p.mu.Unlock()
	for _, f := range changed {
		f()
	}
}

// forgetLocked forgets what was seen of a peer, which is leaving or starting afresh, returning
// the hook calls this makes.
func (p *Prober) forgetLocked(pe *peer) []func() {
	delete(p.lost, pe.key)
	if pe.answered {
		p.answered--
	}
	if !pe.down {
		return nil
	}
	p.down--
	t, n := Target{Key: pe.key, Addr: pe.addr}, p.down
	if p.hooks.Changed == nil {
		return nil
	}
	return []func(){func() { p.hooks.Changed(t, false, n) }}
}

// deleteAt removes the peers at the indices drop (in any order, maybe repeated) from ps,
// keeping the others' order, and lets a slice that fell to a quarter of its room go for a
// smaller one.
func deleteAt(ps []peer, drop []int) []peer {
	if len(drop) == 0 {
		return ps
	}
	slices.Sort(drop)
	drop = slices.Compact(drop)
	n, d := 0, 0
	for i := range ps {
		if d < len(drop) && drop[d] == i {
			d++
			continue
		}
		ps[n] = ps[i]
		n++
	}
	clear(ps[n:]) // lets go of the keys
	ps = ps[:n]
	if cap(ps) > 4*len(ps) {
		ps = slices.Clone(ps)
	}
	return ps
}

// merge adds the peers add to ps, sorted by key, keeping it sorted: one pass from the back, in
// place. Their keys are not in ps; one repeated in add counts once, its last.
func merge(ps, add []peer) []peer {
	if len(add) == 0 {
		return ps
	}
	slices.SortStableFunc(add, func(a, b peer) int { return strings.Compare(a.key, b.key) })
	n := 0
	for i := range add {
		if i+1 < len(add) && add[i+1].key == add[i].key {
			continue
		}
		add[n] = add[i]
		n++
	}
	add = add[:n]
	i, j := len(ps)-1, len(add)-1
	ps = slices.Grow(ps, len(add))[:len(ps)+len(add)]
	for k := len(ps) - 1; j >= 0; k-- {
		if i >= 0 && ps[i].key > add[j].key {
			ps[k] = ps[i]
			i--
		} else {
			ps[k] = add[j]
			j--
		}
	}
	return ps
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
	for k, l := range p.lost { // an unreachable peer has lost its last probes
		if pe := p.peerLocked(k); pe != nil && pe.down {
			out = append(out, Unreachable{Target: Target{Key: k, Addr: pe.addr}, Since: l.since, LastErr: l.lastErr})
		}
	}
	slices.SortFunc(out, func(a, b Unreachable) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// nextLocked is the index of the rotation's next peer: the first after the key it came to
// last, or the first of all at the start of a pass, when the last ran out; false when there
// are none. The peers are sorted by key, so every peer there at the start of a pass comes up
// within it, however many come and go meanwhile.
func (p *Prober) nextLocked() (int, bool) {
	if len(p.peers) == 0 {
		return 0, false
	}
	i := 0
	if p.rotOn {
		j, found := p.findLocked(p.rotKey)
		if found {
			j++
		}
		if j < len(p.peers) {
			i = j
		}
	}
	p.rotKey, p.rotOn = p.peers[i].key, true
	return i, true
}

// rotation walks the keys of the peers in order, through a snapshot of them taken again when
// it runs out, so that every peer there at the start of a pass comes up within it: the
// Transport's (the Prober's peers are sorted already: see Prober.nextLocked).
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
	// Peers picked are marked, not kept in a set: the suspects may be every peer, and one
	// pass over the records clears the marks.
	defer func() {
		for i := range p.peers {
			p.peers[i].picked = false
		}
	}()
	take := func(pe *peer) bool {
		if pe == nil || pe.picked || pe.inFlight {
			return false
		}
		pe.picked = true
		pe.inFlight = true
		out = append(out, Target{Key: pe.key, Addr: pe.addr})
		return true
	}
	// Suspects (new peers, peers with lost probes) within half the budget; those probed
	// go to the back of the queue, those cleared leave it.
	keep, taken := p.suspects[:0], []string(nil)
	for _, k := range p.suspects {
		pe := p.peerLocked(k)
		if pe == nil || !pe.suspect() || pe.picked {
			continue
		}
		if len(taken) < max(budget/2, 1) && take(pe) {
			taken = append(taken, k)
			continue
		}
		pe.picked = true // kept once
		keep = append(keep, k)
	}
	p.suspects = append(keep, taken...)
	// The rotation: through the peers in order, starting again when it runs out, so that
	// every peer there at its start is probed within Summary.Period.
	for tries := 0; len(out) < budget && tries <= len(p.peers); tries++ {
		i, ok := p.nextLocked()
		if !ok {
			break
		}
		take(&p.peers[i])
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
		if pe := p.peerLocked(t.Key); pe != nil {
			pe.inFlight = false
		}
		p.mu.Unlock()
		return
	}
	if p.hooks.Result != nil {
		p.hooks.Result(outcomeOf(err), rtt)
	}
	p.mu.Lock()
	pe := p.peerLocked(t.Key)
	if pe == nil || pe.addr != t.Addr {
		p.mu.Unlock()
		return // gone or changed meanwhile
	}
	pe.inFlight, pe.probed = false, true
	wasAnswered, wasDown := pe.answered, pe.down
	if err == nil {
		delete(p.lost, pe.key)
		pe.failing, pe.answered, pe.down = false, true, false
	} else {
		l := p.lost[pe.key]
		if l == nil {
			l = &lost{since: sent}
			p.lost[pe.key] = l
			p.suspects = append(p.suspects, t.Key) // probed again each round until it answers
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
