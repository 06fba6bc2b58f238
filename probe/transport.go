package probe

import (
	"context"
	"errors"
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
	Failures int           // checks in a row with the signature that make a peer broken; default 3, at most 255
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
	c.Failures = min(c.Failures, 255) // counted in a byte
	return c
}

// TransportHooks are told of what a Transport sees; each may be nil. They are called from
// its goroutines, not under its lock.
type TransportHooks struct {
	// Result: one check's outcome (Outcome*) by kind (Kind*).
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
//
// Its peers are the Prober's, in the Prober's table (see record), under the Prober's lock:
// those whose Target.Transport holds. Those checked out of turn, few, are kept in a set
// besides, so that picking one and listing the broken or short costs what they are, not what
// the cluster is.
type Transport struct {
	cfg     TransportConfig
	p       *Prober // whose table and lock the Transport shares
	pinger  Pinger
	checker Checker
	hooks   TransportHooks
	now     func() time.Time

	suspects map[string]bool // the keys of the peers whose suspect() holds
}

// tpeer is what a Transport keeps of one target besides its addresses and its last check's
// start (in record, whose padding they would leave).
type tpeer struct {
	pmtu     uint16 // what a router on the path said it passes on; 0: not said
	bad      uint8  // checks in a row with the signature (up to Failures)
	big      uint8  // checks in a row whose echoes of MTU bytes showed a short path
	checked  bool   // Target.Transport: the Transport checks the peer
	broken   bool   // bad reached Failures
	recheck  bool   // Recheck asked for a verdict: a broken one is told again
	short    bool   // big reached Failures: the path carries less than MTU
	inFlight bool
}

// suspect reports whether the peer is checked out of turn.
func (pe *tpeer) suspect() bool { return pe.bad > 0 || pe.recheck || pe.big > 0 }

// NewTransport returns a Transport checking the Prober's targets whose Target.Transport
// holds, sending its echoes with the Prober's Pinger and its TCP and UDP with checker. A
// Prober has one Transport at most: a second call replaces the first, which must not run.
func (p *Prober) NewTransport(cfg TransportConfig, checker Checker, hooks TransportHooks) *Transport {
	tr := &Transport{cfg: cfg.withDefaults(), p: p, pinger: p.pinger, checker: checker, hooks: hooks,
		now: time.Now, suspects: map[string]bool{}}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tr = tr
	return tr
}

// noteLocked keeps the set of suspects in step with the peer k's record.
func (tr *Transport) noteLocked(k string, pe *tpeer) {
	if pe.suspect() {
		tr.suspects[k] = true
	} else {
		delete(tr.suspects, k)
	}
}

// Recheck makes the peer key checked again out of turn, counting afresh: Changed is told
// again when Failures more checks show the signature (broken still), or when one passes. The
// caller changed something and wants to know whether it helped.
func (tr *Transport) Recheck(key string) {
	tr.p.mu.Lock()
	defer tr.p.mu.Unlock()
	if r := tr.p.peers.get(key); r != nil && r.t.checked {
		r.t.bad, r.t.recheck = 0, true
		tr.noteLocked(key, &r.t)
	}
}

// Broken lists the peers that are broken now, by key; not those being rechecked, whose
// verdict is pending.
func (tr *Transport) Broken() []Target {
	tr.p.mu.Lock()
	defer tr.p.mu.Unlock()
	var out []Target
	for k := range tr.suspects { // a broken peer is a suspect
		if r := tr.p.peers.get(k); r != nil && r.t.broken && !r.t.recheck {
			out = append(out, r.target(k))
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
	tr.p.mu.Lock()
	defer tr.p.mu.Unlock()
	var out []ShortPath
	for k := range tr.suspects { // a short path's peer is a suspect
		if r := tr.p.peers.get(k); r != nil && r.t.short {
			out = append(out, ShortPath{Target: r.target(k), MTU: int(r.t.pmtu)})
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
	p := tr.p
	p.mu.Lock()
	defer p.mu.Unlock()
	now := tr.now().UnixNano()
	// Half an interval's slack: the ticker's rounds, not the picks, are Interval apart, and
	// a peer due a moment after its round would wait a whole interval more.
	gap := int64(tr.cfg.Gap - tr.cfg.Interval/2)
	due := func(r *record) bool { return !r.t.inFlight && now-r.last >= gap }
	var pick *record
	var key string
	for k := range tr.suspects {
		r := p.peers.get(k)
		if r != nil && due(r) && (pick == nil || r.last < pick.last || r.last == pick.last && k < key) {
			pick, key = r, k
		}
	}
	checked := func(r *record) bool { return r.t.checked }
	for tries := 0; pick == nil && tries <= p.checked; tries++ {
		k, r, ok := p.peers.rotate(rotTransport, checked)
		if !ok {
			break
		}
		if due(r) {
			pick, key = r, k
		}
	}
	if pick == nil {
		return Target{}, false
	}
	pick.t.inFlight, pick.last = true, now
	return pick.target(key), true
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
		tr.p.mu.Lock()
		if r := tr.p.peers.get(t.Key); r != nil && r.target(t.Key) == t {
			r.t.inFlight = false
		}
		tr.p.mu.Unlock()
		return
	}
	if tr.hooks.Result != nil {
		for i, kind := range [3]string{KindICMP, KindTCP, KindUDP} {
			tr.hooks.Result(kind, outcomeOf(errs[i]))
		}
		if sized {
			// The echo behind the peer goes unanswered where no pod holds its address: only
			// its TooBig says something.
			tr.hooks.Result(KindMTU, outcomeOf(errs[3]))
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
	tr.p.mu.Lock()
	r := tr.p.peers.get(t.Key)
	if r == nil || r.target(t.Key) != t {
		tr.p.mu.Unlock()
		return // gone or changed meanwhile
	}
	pe := &r.t
	pe.inFlight = false
	tell := false
	switch v {
	case passed:
		tell = pe.broken
		pe.bad, pe.broken, pe.recheck = 0, false, false
	case signature:
		if int(pe.bad) < tr.cfg.Failures {
			pe.bad++
		}
		if int(pe.bad) >= tr.cfg.Failures && (!pe.broken || pe.recheck) {
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
		if int(pe.big) < tr.cfg.Failures {
			pe.big++
		}
		pe.pmtu = uint16(pmtu)
		if int(pe.big) >= tr.cfg.Failures && !pe.short {
			tellMTU, pe.short = true, true
		}
	}
	sp, short := ShortPath{Target: t, MTU: int(pe.pmtu)}, pe.short
	tr.noteLocked(t.Key, pe)
	tr.p.mu.Unlock()
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

// The kinds and outcomes of the probes that Hooks.Result and TransportHooks.Result are told
// of, as the metrics label them.
const (
	KindICMP = "icmp" // an echo (the Prober's, or the Transport's small one)
	KindTCP  = "tcp"
	KindUDP  = "udp"
	KindMTU  = "mtu" // the Transport's echo of MTU bytes to the VTEP address

	OutcomeOK     = "ok"
	OutcomeLost   = "lost"    // no answer in time
	OutcomeTooBig = "too_big" // a router said the packet is too big: sized echoes only
	OutcomeError  = "error"   // it could not be sent
)

// Results lists every kind and outcome the hooks can be told of together, for counters that
// start each at zero.
func Results() [][2]string {
	var out [][2]string
	for _, kind := range []string{KindICMP, KindTCP, KindUDP, KindMTU} {
		for _, outcome := range []string{OutcomeOK, OutcomeLost, OutcomeError, OutcomeTooBig} {
			if outcome == OutcomeTooBig && kind != KindMTU {
				continue
			}
			out = append(out, [2]string{kind, outcome})
		}
	}
	return out
}

// outcomeOf is a probe's outcome as the metrics label it.
func outcomeOf(err error) string {
	switch _, tooBig := errors.AsType[*TooBig](err); {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrLost):
		return OutcomeLost
	case tooBig:
		return OutcomeTooBig
	}
	return OutcomeError
}
