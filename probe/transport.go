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
	// Result: one check's outcome ("ok", "lost", "error") by kind ("icmp", "tcp", "udp").
	Result func(kind, outcome string)
	// Changed: a peer became broken (it answers ICMP but has passed neither TCP nor UDP
	// Failures checks in a row), or is still broken when rechecked (see Recheck), or passes
	// TCP or UDP again (!broken).
	Changed func(t Target, broken bool)
}

// Transport checks that TCP and UDP, not just ICMP, get through the data plane to each
// peer, one peer per interval: an echo, a TCP connection attempt and a UDP datagram at once
// (see ClosedPort). A peer that answers the echo while neither TCP nor UDP gets through, time
// after time, shows the signature of transmit checksum offload gone wrong on the way: the
// kernel leaves the TCP and UDP checksums to the device, something corrupts them, and the peer
// drops the segments, while ICMP, whose checksum the kernel computes, passes.
//
// Peers whose last check showed the signature are checked out of turn (no more often than
// Gap each); the others in rotation. Its methods are safe for concurrent use.
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
}

// suspect reports whether the peer is checked out of turn.
func (pe *tpeer) suspect() bool { return pe.bad > 0 || pe.recheck }

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

// check checks one peer, echo, TCP and UDP at once, and notes the verdict.
func (tr *Transport) check(ctx context.Context, t Target) {
	cctx, cancel := context.WithTimeout(ctx, tr.cfg.Timeout)
	var errs [3]error
	var wg sync.WaitGroup
	wg.Go(func() { _, errs[0] = tr.pinger.Ping(cctx, t.Addr) })
	wg.Go(func() { errs[1] = tr.checker.Check(cctx, t.Addr, "tcp") })
	wg.Go(func() { errs[2] = tr.checker.Check(cctx, t.Addr, "udp") })
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
	}
	v := inconclusive
	switch lost := func(err error) bool { return errors.Is(err, ErrLost) }; {
	case errs[1] == nil || errs[2] == nil:
		v = passed
	case errs[0] == nil && lost(errs[1]) && lost(errs[2]):
		v = signature
	}
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
	tr.mu.Unlock()
	if tell && tr.hooks.Changed != nil {
		tr.hooks.Changed(t, broken)
	}
}

// outcomeOf is a probe's outcome as the metrics label it.
func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrLost):
		return "lost"
	}
	return "error"
}
