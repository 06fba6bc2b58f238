package probe

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakePinger answers for the addresses that are up, sized echoes only up to their path's MTU
// where one is set (lost beyond it, or answered by a router's TooBig where one says so).
type fakePinger struct {
	mu     sync.Mutex
	down   map[netip.Addr]bool
	mtu    map[netip.Addr]int
	tooBig map[netip.Addr]int
	sent   map[netip.Addr]int
	sizes  []int // of the sized echoes sent
}

func newFakePinger() *fakePinger {
	return &fakePinger{down: map[netip.Addr]bool{}, mtu: map[netip.Addr]int{}, tooBig: map[netip.Addr]int{}, sent: map[netip.Addr]int{}}
}

func (f *fakePinger) Ping(ctx context.Context, dst netip.Addr, size int) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent[dst]++
	if size > 0 {
		f.sizes = append(f.sizes, size)
	}
	if m := f.tooBig[dst]; m > 0 && size > m {
		return 0, fmt.Errorf("ping %s: %w", dst, &TooBig{From: dst, MTU: m})
	}
	if f.down[dst] || f.mtu[dst] > 0 && size > f.mtu[dst] {
		return 0, fmt.Errorf("ping %s: %w", dst, ErrLost)
	}
	return time.Millisecond, nil
}

// setMTU makes the path to a carry sized echoes of mtu bytes at most (0: any), losing the
// larger ones, or, tooBig, answering them with a TooBig naming mtu.
func (f *fakePinger) setMTU(a netip.Addr, mtu int, tooBig bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if tooBig {
		f.tooBig[a] = mtu
	} else {
		f.mtu[a] = mtu
	}
}

func (f *fakePinger) setDown(a netip.Addr, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[a] = down
}

func targets(n int) []Target {
	out := make([]Target, n)
	for i := range out {
		out[i] = Target{Key: fmt.Sprintf("10.244.%d.0-24", i), Addr: netip.AddrFrom4([4]byte{10, 244, byte(i), 0}),
			Behind: netip.AddrFrom4([4]byte{10, 244, byte(i), 254}), Transport: true}
	}
	return out
}

// TestNewPeersQueued: a new peer is probed out of turn, in the next round, while few wait so;
// of many new at once, a few are queued and the rotation reaches the others within the
// period, as it does every peer.
func TestNewPeersQueued(t *testing.T) {
	f := newFakePinger()
	p := New(Config{PerInterval: 4}, f, Hooks{})
	ts := targets(1001)
	p.Set(ts[:1000])
	if n := len(p.suspects); n != p.newQueued() || n > 64 {
		t.Fatalf("1000 new peers: %d queued; want %d", n, p.newQueued())
	}
	rounds := int(p.Summary().Period / time.Second)
	for range rounds {
		runRound(p)
	}
	for _, tg := range ts[:1000] {
		if f.sent[tg.Addr] == 0 {
			t.Fatalf("%s not probed in %d rounds (the period)", tg.Key, rounds)
		}
	}
	if len(p.suspects) != 0 {
		t.Fatalf("every peer probed: %d still queued", len(p.suspects))
	}
	p.Update(ts[1000:], nil)
	if got := runRound(p); len(got) == 0 || got[0] != (Target{Key: ts[1000].Key, Addr: ts[1000].Addr}) {
		t.Errorf("a peer joining: the next round probed %v first; want it", got)
	}
}

// runRound runs one round synchronously, as Run does, and returns what it probed.
func runRound(p *Prober) []Target {
	ts := p.round()
	for _, t := range ts {
		p.probe(context.Background(), t)
	}
	return ts
}

// TestRotationCoversEveryPeer: however many peers, a round probes at most PerInterval of
// them, and every peer is probed within Summary.Period.
func TestRotationCoversEveryPeer(t *testing.T) {
	for _, n := range []int{1, 3, 10, 1000} {
		f := newFakePinger()
		p := New(Config{PerInterval: 4}, f, Hooks{})
		p.Set(targets(n))
		rounds := int(p.Summary().Period / time.Second)
		// New peers are probed out of turn first; then the rotation's guarantee holds.
		for len(p.suspects) > 0 {
			if got := runRound(p); len(got) > 4 {
				t.Fatalf("%d peers: a round probed %d", n, len(got))
			}
		}
		clear(f.sent)
		for range rounds {
			if got := runRound(p); len(got) > 4 {
				t.Fatalf("%d peers: a round probed %d", n, len(got))
			}
		}
		for _, tg := range targets(n) {
			if f.sent[tg.Addr] == 0 {
				t.Fatalf("%d peers: %s not probed in %d rounds (the period)", n, tg.Key, rounds)
			}
		}
		if s := p.Summary(); s.Targets != n || s.Answered != n || s.Unreachable != 0 {
			t.Errorf("%d peers: %+v", n, s)
		}
	}
}

// TestUnreachableAndBack: a peer that stops answering is probed every round, counts as
// unreachable after Failures lost probes (since the first), and as reachable when it answers
// again; the hook hears of each change once.
func TestUnreachableAndBack(t *testing.T) {
	f := newFakePinger()
	var changes []string
	p := New(Config{PerInterval: 4, Failures: 3}, f, Hooks{Changed: func(tg Target, down bool, n int) {
		changes = append(changes, fmt.Sprintf("%s down=%v n=%d", tg.Key, down, n))
	}})
	ts := targets(100)
	p.Set(ts)
	for len(p.suspects) > 0 || p.Summary().Answered < len(ts) {
		runRound(p)
	}
	dead := ts[42]
	f.setDown(dead.Addr, true)
	// Wait until the rotation meets it, then it takes Failures-1 more rounds.
	start := time.Now()
	p.now = func() time.Time { return start }
	for i := 0; len(p.Unreachable()) == 0; i++ {
		if i > 100 {
			t.Fatal("the dead peer never counted as unreachable")
		}
		runRound(p)
	}
	u := p.Unreachable()
	if len(u) != 1 || u[0].Key != dead.Key || !u[0].Since.Equal(start) || u[0].LastErr == "" {
		t.Errorf("Unreachable() = %+v", u)
	}
	if s := p.Summary(); s.Unreachable != 1 || s.Answered != 99 || s.Isolated() {
		t.Errorf("Summary() = %+v", s)
	}
	f.setDown(dead.Addr, false)
	runRound(p) // probed out of turn: back at once
	if len(p.Unreachable()) != 0 {
		t.Errorf("the peer answers again but stays unreachable: %+v", p.Unreachable())
	}
	want := []string{dead.Key + " down=true n=1", dead.Key + " down=false n=0"}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Errorf("changes %v, want %v", changes, want)
	}

	// An unreachable peer that leaves is no longer unreachable.
	f.setDown(dead.Addr, true)
	for i := 0; len(p.Unreachable()) == 0; i++ {
		if i > 100 {
			t.Fatal("the dead peer never counted as unreachable again")
		}
		runRound(p)
	}
	p.Update(nil, []Target{{Key: dead.Key}})
	if s := p.Summary(); s.Unreachable != 0 || s.Targets != 99 || changes[len(changes)-1] != dead.Key+" down=false n=0" {
		t.Errorf("after the peer left: %+v, changes %v", s, changes)
	}
}

// TestIsolated: a node whose every peer stops answering says so.
func TestIsolated(t *testing.T) {
	f := newFakePinger()
	p := New(Config{PerInterval: 8, Failures: 2}, f, Hooks{})
	ts := targets(3)
	p.Set(ts)
	runRound(p)
	if p.Summary().Isolated() {
		t.Fatal("isolated while every peer answers")
	}
	for _, tg := range ts {
		f.setDown(tg.Addr, true)
	}
	for range 3 {
		runRound(p)
	}
	if s := p.Summary(); !s.Isolated() || s.Unreachable != 3 {
		t.Errorf("every peer lost: %+v, want isolated", s)
	}
	f.setDown(ts[0].Addr, false)
	runRound(p)
	if s := p.Summary(); s.Isolated() {
		t.Errorf("one peer answers: %+v, not isolated", s)
	}
}

// TestChangedAddressStartsAfresh: a peer whose address changes is a new target.
func TestChangedAddressStartsAfresh(t *testing.T) {
	f := newFakePinger()
	p := New(Config{Failures: 1}, f, Hooks{})
	tg := targets(1)[0]
	f.setDown(tg.Addr, true)
	p.Set([]Target{tg})
	runRound(p)
	if len(p.Unreachable()) != 1 {
		t.Fatal("not unreachable")
	}
	moved := Target{Key: tg.Key, Addr: netip.MustParseAddr("10.244.200.0")}
	p.Update([]Target{moved}, nil)
	if len(p.Unreachable()) != 0 || p.Summary().Targets != 1 {
		t.Errorf("after the move: %+v %+v", p.Unreachable(), p.Summary())
	}
	runRound(p)
	if p.Summary().Answered != 1 || f.sent[moved.Addr] != 1 {
		t.Errorf("the moved peer: %+v, sent %v", p.Summary(), f.sent)
	}
}
