package probe

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"
)

// fakeChecker gets TCP or UDP through, per address and protocol, unless told to lose it or to
// fail sending it.
type fakeChecker struct {
	mu   sync.Mutex
	lose map[netip.Addr]map[string]error
	sent map[netip.Addr]int
}

func newFakeChecker() *fakeChecker {
	return &fakeChecker{lose: map[netip.Addr]map[string]error{}, sent: map[netip.Addr]int{}}
}

func (f *fakeChecker) Check(_ context.Context, dst netip.Addr, proto string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent[dst]++
	return f.lose[dst][proto]
}

// set makes proto to a fail with err (nil: get through).
func (f *fakeChecker) set(a netip.Addr, err error, protos ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lose[a] == nil {
		f.lose[a] = map[string]error{}
	}
	for _, p := range protos {
		f.lose[a][p] = err
	}
}

// transportRig drives a Transport round by round on a clock of its own.
type transportRig struct {
	p       *Prober // whose targets tr checks; never run
	tr      *Transport
	ping    *fakePinger
	check   *fakeChecker
	clock   time.Time
	changes []string // "key broken" or "key ok", as Changed was told
	mtu     []string // "key short" or "key whole", as MTUChanged was told
	checked []string // the keys checked, in order
}

// rigMTU is the pods' MTU the rig's Transport checks paths for.
const rigMTU = 1450

func newTransportRig(n int) *transportRig {
	r := &transportRig{ping: newFakePinger(), check: newFakeChecker(), clock: time.Unix(1e9, 0)}
	r.p = New(Config{}, r.ping, Hooks{})
	r.tr = r.p.NewTransport(TransportConfig{MTU: rigMTU}, r.check, TransportHooks{
		Changed: func(t Target, broken bool) {
			s := t.Key + " ok"
			if broken {
				s = t.Key + " broken"
			}
			r.changes = append(r.changes, s)
		},
		MTUChanged: func(p ShortPath, short bool) {
			s := p.Key + " whole"
			if short {
				s = fmt.Sprintf("%s short %d", p.Key, p.MTU)
			}
			r.mtu = append(r.mtu, s)
		},
	})
	r.tr.now = func() time.Time { return r.clock }
	r.p.Set(targets(n))
	return r
}

// rounds runs n rounds, a second apart, as Run does.
func (r *transportRig) rounds(n int) {
	for range n {
		if t, ok := r.tr.next(); ok {
			r.checked = append(r.checked, t.Key)
			r.tr.check(context.Background(), t)
		}
		r.clock = r.clock.Add(time.Second)
	}
}

func lostErr(what string) error { return fmt.Errorf("%s: %w", what, ErrLost) }

// TestTransportSignature: a peer that answers ICMP while its TCP and UDP are lost is told
// broken once, after Failures checks, each at least Gap apart; told again when rechecked and
// still broken; told ok once TCP gets through. The other peers are never told anything.
func TestTransportSignature(t *testing.T) {
	r := newTransportRig(4)
	bad := targets(4)[2]
	r.rounds(8) // every peer checked, all pass
	if len(r.changes) != 0 {
		t.Fatalf("healthy peers: Changed told %q", r.changes)
	}
	r.check.set(bad.Addr, lostErr("tcp/udp"), "tcp", "udp")
	r.checked = nil
	rounds := 0
	for len(r.changes) == 0 && rounds < 30 {
		r.rounds(1)
		rounds++
	}
	// The rotation reaches it within 4 rounds; then two more checks, Gap (3 s) apart.
	if want := []string{bad.Key + " broken"}; fmt.Sprint(r.changes) != fmt.Sprint(want) {
		t.Fatalf("after %d rounds Changed told %q; want %q", rounds, r.changes, want)
	}
	if rounds > 4+2*3 {
		t.Errorf("broken peer told after %d rounds of 1 s; want at most %d", rounds, 4+2*3)
	}
	t.Logf("broken peer told after %d rounds", rounds)
	assertGap(t, r.checked, bad.Key, 3)
	if got := r.tr.Broken(); len(got) != 1 || got[0] != bad {
		t.Errorf("Broken() = %v; want [%v]", got, bad)
	}

	// Still broken: nothing more is told...
	r.rounds(20)
	if len(r.changes) != 1 {
		t.Fatalf("a peer broken all along: Changed told %q", r.changes)
	}
	// ...until a Recheck, which is answered within Failures checks, Gap apart.
	r.tr.Recheck(bad.Key)
	if got := r.tr.Broken(); len(got) != 0 {
		t.Errorf("Broken() = %v while rechecking; want the verdict pending", got)
	}
	r.checked = nil
	r.rounds(3*3 + 1)
	if want := []string{bad.Key + " broken", bad.Key + " broken"}; fmt.Sprint(r.changes) != fmt.Sprint(want) {
		t.Fatalf("rechecked, still broken: Changed told %q; want %q", r.changes, want)
	}
	assertGap(t, r.checked, bad.Key, 3)
	if got := r.tr.Broken(); len(got) != 1 {
		t.Errorf("Broken() = %v after the recheck; want [%v]", got, bad)
	}

	// TCP alone passing is enough.
	r.check.set(bad.Addr, nil, "tcp")
	r.rounds(8)
	if want := []string{bad.Key + " broken", bad.Key + " broken", bad.Key + " ok"}; fmt.Sprint(r.changes) != fmt.Sprint(want) {
		t.Fatalf("healed: Changed told %q; want %q", r.changes, want)
	}
	if got := r.tr.Broken(); len(got) != 0 {
		t.Errorf("Broken() = %v after it healed", got)
	}
	r.tr.Recheck(bad.Key) // rechecked while passing: nothing to tell
	r.rounds(8)
	if len(r.changes) != 3 {
		t.Errorf("a Recheck of a passing peer told %q", r.changes[3:])
	}
}

// assertGap fails when key was checked twice within gap rounds.
func assertGap(t *testing.T, checked []string, key string, gap int) {
	t.Helper()
	last := -gap
	for i, k := range checked {
		if k != key {
			continue
		}
		if i-last < gap {
			t.Fatalf("%s checked in rounds %d and %d: closer than the gap (%d): %q", key, last, i, gap, checked)
		}
		last = i
	}
}

// TestTransportNotSignature: only "ICMP passes, TCP and UDP lost" counts: a peer that answers
// nothing (down, the probes' business), whose TCP or UDP alone is lost, or whose checks fail
// to be sent, is never told broken; and an inconclusive check does not clear a count.
func TestTransportNotSignature(t *testing.T) {
	r := newTransportRig(4)
	ts := targets(4)
	r.ping.setDown(ts[0].Addr, true)
	r.check.set(ts[0].Addr, lostErr("all"), "tcp", "udp")
	r.check.set(ts[1].Addr, lostErr("udp"), "udp")
	r.check.set(ts[2].Addr, lostErr("tcp"), "tcp")
	r.check.set(ts[3].Addr, errors.New("network unreachable"), "tcp", "udp")
	r.rounds(60)
	if len(r.changes) != 0 {
		t.Fatalf("Changed told %q; want nothing", r.changes)
	}

	// Two signatures, a lost echo between them, a third: broken.
	r = newTransportRig(1)
	a := ts[0].Addr
	r.check.set(a, lostErr("tcp/udp"), "tcp", "udp")
	r.rounds(4) // checks in rounds 0 and 3
	r.ping.setDown(a, true)
	r.rounds(3)
	r.ping.setDown(a, false)
	r.rounds(3)
	if want := []string{ts[0].Key + " broken"}; fmt.Sprint(r.changes) != fmt.Sprint(want) {
		t.Fatalf("Changed told %q; want %q (checks %q)", r.changes, want, r.checked)
	}
}

// TestTransportBudget: one check a round whatever the number of peers, each peer checked
// within a rotation's length, none faster than the gap; peers gone are no longer checked.
func TestTransportBudget(t *testing.T) {
	r := newTransportRig(10)
	r.rounds(10)
	for _, tg := range targets(10) {
		if r.check.sent[tg.Addr] != 2 { // a TCP and a UDP
			t.Errorf("%s: %d checks sent in a rotation; want one of each kind", tg.Key, r.check.sent[tg.Addr])
		}
	}
	r.p.Update(nil, targets(10)[1:])
	r.checked = nil
	r.rounds(10)
	for _, k := range r.checked {
		if k != targets(1)[0].Key {
			t.Fatalf("removed peer %s checked", k)
		}
	}
	if len(r.checked) > 4 {
		t.Errorf("one peer left: checked %d times in 10 rounds; want every 3 s at most", len(r.checked))
	}
}

// TestTransportPathMTU: each check sends echoes of the pods' MTU too, to the VTEP address and
// behind the peer. A peer whose tunnel loses them (the small echo answered) or that answers
// the one behind it with a TooBig below the MTU is told short once, after Failures checks Gap
// apart, with the MTU said if any, and listed by Short; told whole once they pass again. A
// peer that answers no echo at all is down, not short; a TooBig at the MTU or above is no
// fault; the checksum verdicts stay apart.
func TestTransportPathMTU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		set    func(p *fakePinger, tg Target, on bool)
		report string // after the key
	}{
		{"tunnel loses them", func(p *fakePinger, tg Target, on bool) { p.setMTU(tg.Addr, onOff(on, 1400), false) }, "short 0"},
		{"peer's pods take less", func(p *fakePinger, tg Target, on bool) { p.setMTU(tg.Behind, onOff(on, 1350), true) }, "short 1350"},
		{"router on the way takes less", func(p *fakePinger, tg Target, on bool) { p.setMTU(tg.Addr, onOff(on, 1300), true) }, "short 1300"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newTransportRig(4)
			ts := targets(4)
			r.ping.setMTU(ts[3].Behind, rigMTU, true) // says so, but the MTU passes: no fault
			r.rounds(8)
			if len(r.mtu) != 0 || len(r.ping.sizes) == 0 {
				t.Fatalf("whole paths: MTUChanged told %q, %d sized echoes sent", r.mtu, len(r.ping.sizes))
			}
			for _, s := range r.ping.sizes {
				if s != rigMTU {
					t.Fatalf("sized echo of %d bytes; want the MTU, %d", s, rigMTU)
				}
			}

			tc.set(r.ping, ts[1], true)
			r.ping.setDown(ts[2].Addr, true)
			r.checked = nil
			rounds := 0
			for len(r.mtu) == 0 && rounds < 30 {
				r.rounds(1)
				rounds++
			}
			if want := []string{ts[1].Key + " " + tc.report}; fmt.Sprint(r.mtu) != fmt.Sprint(want) {
				t.Fatalf("after %d rounds MTUChanged told %q; want %q", rounds, r.mtu, want)
			}
			if rounds > 4+2*3 {
				t.Errorf("short path told after %d rounds of 1 s; want at most %d", rounds, 4+2*3)
			}
			assertGap(t, r.checked, ts[1].Key, 3)
			if got := r.tr.Short(); len(got) != 1 || got[0].Target != ts[1] || fmt.Sprintf("short %d", got[0].MTU) != tc.report {
				t.Errorf("Short() = %v; want [%v %s]", got, ts[1], tc.report)
			}
			if len(r.changes) != 0 || len(r.tr.Broken()) != 0 {
				t.Errorf("a short path made the checksum checks tell %q, Broken %v", r.changes, r.tr.Broken())
			}
			r.rounds(20) // still short, the down peer still down: nothing more
			if len(r.mtu) != 1 {
				t.Fatalf("still short: MTUChanged told %q", r.mtu)
			}

			tc.set(r.ping, ts[1], false)
			r.rounds(4) // checked out of turn, Gap apart: within a Gap and a round
			if want := []string{ts[1].Key + " " + tc.report, ts[1].Key + " whole"}; fmt.Sprint(r.mtu) != fmt.Sprint(want) {
				t.Fatalf("whole again: MTUChanged told %q; want %q", r.mtu, want)
			}
			if got := r.tr.Short(); len(got) != 0 {
				t.Errorf("Short() = %v after the path carries the MTU again", got)
			}
		})
	}

	// No MTU configured: no sized echo.
	p := newFakePinger()
	pr := New(Config{}, p, Hooks{})
	tr := pr.NewTransport(TransportConfig{}, newFakeChecker(), TransportHooks{})
	pr.Set(targets(4))
	for range 4 {
		if tg, ok := tr.next(); ok {
			tr.check(context.Background(), tg)
		}
	}
	if len(p.sizes) != 0 {
		t.Errorf("without an MTU, sized echoes of %v bytes were sent", p.sizes)
	}
}

// onOff is v when on, else 0.
func onOff(on bool, v int) int {
	if on {
		return v
	}
	return 0
}

// TestTransportChecksItsPeers: the Transport checks the Prober's targets whose Transport
// holds, and no others; one that stops being checked leaves its verdicts behind and starts
// afresh when checked again, and one the Prober drops is no longer checked. A change that
// concerns the Transport alone (Transport, Behind) leaves the Prober's view of the peer be.
func TestTransportChecksItsPeers(t *testing.T) {
	r := newTransportRig(0)
	ts := targets(6)
	for i := range ts {
		ts[i].Transport = i%2 == 0
	}
	r.p.Set(ts)
	runRound(r.p)
	runRound(r.p)
	if s := r.p.Summary(); s.Targets != 6 || s.Answered != 6 {
		t.Fatalf("Prober: %+v; want every target probed and answered", s)
	}
	r.rounds(12)
	seen := map[string]int{}
	for _, k := range r.checked {
		seen[k]++
	}
	for i, tg := range ts {
		if (seen[tg.Key] > 0) != tg.Transport {
			t.Fatalf("%s (Transport %v) checked %d times in 12 rounds: %q", tg.Key, tg.Transport, seen[tg.Key], r.checked)
		}
		if tg.Transport && seen[tg.Key] < 3 {
			t.Errorf("target %d checked %d times in 12 rounds; want one each Gap", i, seen[tg.Key])
		}
	}

	bad := ts[0]
	r.check.set(bad.Addr, lostErr("tcp/udp"), "tcp", "udp")
	for i := 0; len(r.changes) == 0; i++ {
		if i > 30 {
			t.Fatal("the broken peer was never told")
		}
		r.rounds(1)
	}
	if got := r.tr.Broken(); len(got) != 1 || got[0] != bad {
		t.Fatalf("Broken() = %v; want [%v]", got, bad)
	}
	// No longer checked: its verdict goes, and so do its checks.
	bad.Transport = false
	r.p.Update([]Target{bad}, nil)
	r.checked = nil
	r.rounds(12)
	if got := r.tr.Broken(); len(got) != 0 || slices.Contains(r.checked, bad.Key) {
		t.Fatalf("unchecked: Broken() = %v, checked %q", got, r.checked)
	}
	if s := r.p.Summary(); s.Targets != 6 || s.Answered != 6 {
		t.Errorf("Prober after the Transport's change: %+v; want its view kept", s)
	}
	// Checked again: afresh, Failures checks before it is told broken again.
	bad.Transport = true
	r.p.Update([]Target{bad}, nil)
	r.changes = nil
	r.rounds(1) // the rotation may need a pass to reach it, then Gap between checks
	for i := 0; len(r.changes) == 0; i++ {
		if i > 30 {
			t.Fatal("the broken peer, checked again, was never told")
		}
		r.rounds(1)
	}
	if n := countOf(r.checked, bad.Key); n < 3 {
		t.Errorf("told broken again after %d checks; want Failures (3), counted afresh", n)
	}
	// Dropped by the Prober: no longer checked, nor listed.
	r.p.Update(nil, []Target{{Key: bad.Key}})
	r.checked = nil
	r.rounds(12)
	if got := r.tr.Broken(); len(got) != 0 || slices.Contains(r.checked, bad.Key) {
		t.Fatalf("dropped: Broken() = %v, checked %q", got, r.checked)
	}
}

// countOf is how many times k is in ks.
func countOf(ks []string, k string) int {
	n := 0
	for _, x := range ks {
		if x == k {
			n++
		}
	}
	return n
}
