package probe

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// TransportConfig tunes a Transport; zero fields take the defaults.
type TransportConfig struct {
	Interval time.Duration // between checks, of one peer each; default 1 s
	// Gap is the least time between two checks of one peer (give or take half an
	// interval), within the peers' ICMP rate limits (the UDP check's answer is an ICMP
	// error); default 3 s.
	Gap      time.Duration
	Timeout  time.Duration // for an answer; default 1 s
	Failures int           // checks in a row with the signature that make a peer broken; default 3
	// MTU is the largest packet the node's pods send through the overlay (their MTU): each
	// check sends echoes that large too, which must arrive whole, to the peer's VTEP address
	// and to an address the peer forwards to its pods (Target.Behind); a peer whose path
	// does not carry them, Failures checks in a row, is reported (MTUChanged). 0: no such
	// echoes.
	MTU int
}

func (c TransportConfig) withDefaults() TransportConfig {
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Gap <= 0 {
		c.Gap = 3 * time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.Failures <= 0 {
		c.Failures = 3
	}
	return c
}

// TransportHooks are told of what a Transport sees; each may be nil. They are called from
// its goroutines, not under its lock.
type TransportHooks struct {
	// Result: one check's outcome ("ok", "lost", "error") by kind ("icmp", "tcp", "udp",
	// and "mtu" for the echo of MTU bytes).
	Result func(kind, outcome string)
	// Changed: a peer became broken (it answers ICMP but has passed neither TCP nor UDP
	// Failures checks in a row), or is still broken when rechecked (see Recheck), or passes
	// TCP or UDP again (!broken).
	Changed func(t Target, broken bool)
	// MTUChanged: the path to a peer is found to carry less than MTU, or carries it again
	// (!short).
	MTUChanged func(p ShortPath, short bool)
}

// Transport checks that TCP and UDP, not just ICMP, get through the data plane to each
// peer, one peer per interval: an echo, a TCP connection attempt and a UDP datagram at once
// (see ClosedPort). A peer that answers the echo while neither TCP nor UDP gets through, time
// after time, shows the signature of transmit checksum offload gone wrong on the way: the
// kernel leaves the TCP and UDP checksums to the device, something corrupts them, and the peer
// drops the segments, while ICMP, whose checksum the kernel computes, passes.
//
// Echoes as large as the pods' MTU, sent along with them, check that the path carries what
// the pods send, up to the peer's pods: one to the peer's VTEP address checks the tunnel (an
// underlay that drops the large outer packets, or their fragments, loses it while the small
// echo is answered); one to an address in the peer's subnet, which the peer forwards to its
// pods' bridge, checks the peer's own side: a peer whose pods have a smaller MTU (its
// underlay's is smaller) cannot forward it and says so with its MTU (TooBig), as it does for
// every such packet of this node's pods, which it drops.
//
// Peers whose last check showed the signature or a lost large echo are checked out of turn
// (no more often than Gap each); the others in rotation. Its methods are safe for concurrent
// use.
type Transport struct {
	cfg     TransportConfig
	pinger  Pinger
	checker Checker
	hooks   TransportHooks
	now     func() time.Time

	mu    sync.Mutex
	peers map[string]*tpeer
	rot   rotation
}

// tpeer is what a Transport keeps of one target.
type tpeer struct {
	addr     Target
	bad      int       // checks in a row with the signature
	broken   bool      // bad reached Failures
	recheck  bool      // Recheck asked for a verdict: a broken one is told again
	last     time.Time // the last check's start
	inFlight bool
	big      int    // checks in a row whose echoes of MTU bytes showed a short path
	short    bool   // big reached Failures: the path carries less than MTU
	pmtu     uint16 // what a router on the path said it passes on; 0: not said
}

// suspect reports whether the peer is checked out of turn.
func (pe *tpeer) suspect() bool { return pe.bad > 0 || pe.recheck || pe.big > 0 }

// NewTransport returns a Transport sending its echoes with pinger and its TCP and UDP with
// checker.
func NewTransport(cfg TransportConfig, pinger Pinger, checker Checker, hooks TransportHooks) *Transport {
	return &Transport{cfg: cfg.withDefaults(), pinger: pinger, checker: checker, hooks: hooks,
		now: time.Now, peers: map[string]*tpeer{}}
}

// Set makes the targets exactly ts.
func (tr *Transport) Set(ts []Target) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	keep := make(map[string]bool, len(ts))
	for _, t := range ts {
		keep[t.Key] = true
	}
	for k := range tr.peers {
		if !keep[k] {
			delete(tr.peers, k)
		}
	}
	tr.putLocked(ts)
}

// Update adds or changes the targets in put and removes those in removed (only their keys
// count). A target whose address changed starts afresh.
func (tr *Transport) Update(put, removed []Target) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for _, t := range removed {
		delete(tr.peers, t.Key)
	}
	tr.putLocked(put)
}

func (tr *Transport) putLocked(ts []Target) {
	for _, t := range ts {
		if pe, ok := tr.peers[t.Key]; ok && pe.addr == t {
			continue
		}
		tr.peers[t.Key] = &tpeer{addr: t}
	}
}

// Recheck makes the peer key checked again out of turn, counting afresh: Changed is told
// again when Failures more checks show the signature (broken still), or when one passes. The
// caller changed something and wants to know whether it helped.
func (tr *Transport) Recheck(key string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if pe, ok := tr.peers[key]; ok {
		pe.bad, pe.recheck = 0, true
	}
}

// Broken lists the peers that are broken now, by key; not those being rechecked, whose
// verdict is pending.
func (tr *Transport) Broken() []Target {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []Target
	for _, pe := range tr.peers {
		if pe.broken && !pe.recheck {
			out = append(out, pe.addr)
		}
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// ShortPath is a peer whose path carries less than MTU.
type ShortPath struct {
	Target
	// MTU is the largest packet a router on the way (most often the peer, forwarding to its
	// pods) said it passes on; 0 when the large echoes were just lost.
	MTU int
}

// Short lists the peers whose path carries less than MTU, by key.
func (tr *Transport) Short() []ShortPath {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var out []ShortPath
	for _, pe := range tr.peers {
		if pe.short {
			out = append(out, ShortPath{Target: pe.addr, MTU: int(pe.pmtu)})
		}
	}
	slices.SortFunc(out, func(a, b ShortPath) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// Run checks until ctx is done: a peer every Interval.
func (tr *Transport) Run(ctx context.Context) {
	tick := time.NewTicker(tr.cfg.Interval)
	defer tick.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		if t, ok := tr.next(); ok {
			wg.Go(func() { tr.check(ctx, t) })
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// next picks the peer to check: the suspect checked longest ago, else the next in the
// rotation; none checked within Gap, none still waiting for its answers.
func (tr *Transport) next() (Target, bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	now := tr.now()
	// Half an interval's slack: the ticker's rounds, not the picks, are Interval apart, and
	// a peer due a moment after its round would wait a whole interval more.
	due := func(pe *tpeer) bool { return !pe.inFlight && now.Sub(pe.last) >= tr.cfg.Gap-tr.cfg.Interval/2 }
	var pick *tpeer
	for _, pe := range tr.peers {
		if pe.suspect() && due(pe) && (pick == nil || pe.last.Before(pick.last) ||
			pe.last.Equal(pick.last) && pe.addr.Key < pick.addr.Key) {
			pick = pe
		}
	}
	for tries := 0; pick == nil && tries <= len(tr.peers); tries++ {
		k, ok := tr.rot.next(maps.Keys(tr.peers))
		if !ok {
			break
		}
		if pe := tr.peers[k]; pe != nil && due(pe) {
			pick = pe
		}
	}
	if pick == nil {
		return Target{}, false
	}
	pick.inFlight, pick.last = true, now
	return pick.addr, true
}

// verdict is what one check of a peer shows.
type verdict int

const (
	inconclusive verdict = iota // the echo went unanswered, or something failed to send
	signature                   // the echo answered, TCP and UDP lost
	passed                      // TCP or UDP got through
)

// check checks one peer, echo, TCP, UDP and the echoes of MTU bytes at once, and notes the
// verdicts.
func (tr *Transport) check(ctx context.Context, t Target) {
	cctx, cancel := context.WithTimeout(ctx, tr.cfg.Timeout)
	var errs [5]error
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = tr.pinger.Ping(cctx, t.Addr, 0) })
	wg.Go(func() { errs[1] = tr.checker.Check(cctx, t.Addr, "tcp") })
	wg.Go(func() { errs[2] = tr.checker.Check(cctx, t.Addr, "udp") })
	sized := tr.cfg.MTU > 0
	if sized {
		wg.Go(func() { _, errs[3] = tr.pinger.Ping(cctx, t.Addr, tr.cfg.MTU) })
		if t.Behind.IsValid() {
			wg.Go(func() { _, errs[4] = tr.pinger.Ping(cctx, t.Behind, tr.cfg.MTU) })
		}
	}
	wg.Wait()
	cancel()
	if ctx.Err() != nil {
		tr.mu.Lock()
		if pe, ok := tr.peers[t.Key]; ok {
			pe.inFlight = false
		}
		tr.mu.Unlock()
		return
	}
	if tr.hooks.Result != nil {
		for i, kind := range [3]string{"icmp", "tcp", "udp"} {
			tr.hooks.Result(kind, outcomeOf(errs[i]))
		}
		if sized {
			// The echo behind the peer goes unanswered where no pod holds its address: only
			// its TooBig says something.
			tr.hooks.Result("mtu", outcomeOf(errs[3]))
		}
	}
	lost := func(err error) bool { return errors.Is(err, ErrLost) }
	v := inconclusive
	switch {
	case errs[1] == nil || errs[2] == nil:
		v = passed
	case errs[0] == nil && lost(errs[1]) && lost(errs[2]):
		v = signature
	}
	mv, pmtu := tr.pathVerdict(errs[0], errs[3], errs[4])
	tr.mu.Lock()
	pe, ok := tr.peers[t.Key]
	if !ok || pe.addr != t {
		tr.mu.Unlock()
		return // gone or changed meanwhile
	}
	pe.inFlight = false
	tell := false
	switch v {
	case passed:
		tell = pe.broken
		pe.bad, pe.broken, pe.recheck = 0, false, false
	case signature:
		pe.bad++
		if pe.bad >= tr.cfg.Failures && (!pe.broken || pe.recheck) {
			tell = true
			pe.broken, pe.recheck = true, false
		}
	}
	broken := pe.broken
	tellMTU := false
	switch mv {
	case passed:
		tellMTU = pe.short
		pe.big, pe.short = 0, false
	case signature:
		pe.big++
		pe.pmtu = uint16(pmtu)
		if pe.big >= tr.cfg.Failures && !pe.short {
			tellMTU, pe.short = true, true
		}
	}
	sp, short := ShortPath{Target: t, MTU: int(pe.pmtu)}, pe.short
	tr.mu.Unlock()
	if tell && tr.hooks.Changed != nil {
		tr.hooks.Changed(t, broken)
	}
	if tellMTU && tr.hooks.MTUChanged != nil {
		tr.hooks.MTUChanged(sp, short)
	}
}

// pathVerdict is what the echoes of one check say of the path's MTU: the small echo's error,
// the sized one's to the VTEP address and the sized one's behind the peer. A router's TooBig
// below MTU, or the sized echo to the VTEP lost while the small one is answered, shows a
// short path (with the MTU said, if any); the sized echo to the VTEP answered and none too
// big, a path that carries MTU.
func (tr *Transport) pathVerdict(small, vtep, behind error) (verdict, int) {
	if tr.cfg.MTU == 0 {
		return inconclusive, 0
	}
	pmtu := 0
	for _, err := range []error{vtep, behind} {
		if tb, ok := errors.AsType[*TooBig](err); ok && tb.MTU < tr.cfg.MTU && (pmtu == 0 || tb.MTU < pmtu) {
			pmtu = tb.MTU
		}
	}
	switch {
	case pmtu > 0:
		return signature, pmtu
	case small == nil && errors.Is(vtep, ErrLost):
		return signature, 0
	case vtep == nil:
		return passed, 0
	}
	return inconclusive, 0
}

// outcomeOf is a probe's outcome as the metrics label it.
func outcomeOf(err error) string {
	switch _, tooBig := errors.AsType[*TooBig](err); {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLost):
		return "lost"
	case tooBig:
		return "too_big"
	}
	return "error"
}
