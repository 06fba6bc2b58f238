package probe

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

// checkPeers fails unless the Prober's table holds exactly want (key to address), each once,
// its index and slots agreeing, and its side map holds only failing peers.
func checkPeers(t *testing.T, p *Prober, want map[string]netip.Addr) {
	t.Helper()
	checkTable(t, &p.peers)
	got := map[string]netip.Addr{}
	for k, pe := range p.peers.all() {
		got[k] = pe.addr
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
	for k := range p.lost {
		if pe := p.peers.get(k); pe == nil || !pe.p.failing {
			t.Fatalf("%s in the side map, not failing", k)
		}
	}
	for k, pe := range p.peers.all() {
		if _, ok := p.lost[k]; ok != pe.p.failing {
			t.Fatalf("%s failing=%v, in the side map %v", k, pe.p.failing, ok)
		}
	}
}

// TestUpdateKeepsPeers: whatever Updates and Sets do (keys put twice in one Update, removed
// and put back in one, removed twice or absent), the peers are as the changes say, once each.
func TestUpdateKeepsPeers(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := New(Config{}, newFakePinger(), Hooks{})
	want := map[string]netip.Addr{}
	key := func() string { return fmt.Sprintf("k%03d", rng.IntN(300)) }
	addr := func() netip.Addr { return netip.AddrFrom4([4]byte{10, 0, 0, byte(rng.IntN(3))}) }
	for i := range 500 {
		if i%50 == 49 {
			var ts []Target
			clear(want)
			for range rng.IntN(200) {
				t := Target{Key: key(), Addr: addr()}
				if _, ok := want[t.Key]; !ok {
					ts = append(ts, t)
					want[t.Key] = t.Addr
				}
			}
			p.Set(ts)
			checkPeers(t, p, want)
			continue
		}
		var put, removed []Target
		for range rng.IntN(8) {
			k := key()
			removed = append(removed, Target{Key: k})
			delete(want, k)
		}
		for range rng.IntN(20) {
			t := Target{Key: key(), Addr: addr()}
			put = append(put, t)
			want[t.Key] = t.Addr // the last put of a key counts
		}
		p.Update(put, removed)
		checkPeers(t, p, want)
		runRound(p)
		checkPeers(t, p, want)
	}
}

// TestLostProbesKeptAside: what a lost probe leaves (since when, the error) is kept while
// the peer's probes are lost, and goes when it answers, leaves, or changes address.
func TestLostProbesKeptAside(t *testing.T) {
	f := newFakePinger()
	p := New(Config{PerInterval: 8, Failures: 2}, f, Hooks{})
	ts := targets(4)
	p.Set(ts)
	want := map[string]netip.Addr{}
	for _, tg := range ts {
		want[tg.Key] = tg.Addr
	}
	for _, tg := range ts {
		f.setDown(tg.Addr, true)
	}
	start := time.Now()
	p.now = func() time.Time { return start }
	runRound(p)
	checkPeers(t, p, want)
	if len(p.lost) != 4 || len(p.Unreachable()) != 0 {
		t.Fatalf("after a lost probe each: lost %v, unreachable %v", p.lost, p.Unreachable())
	}
	p.now = func() time.Time { return start.Add(time.Second) }
	runRound(p)
	if u := p.Unreachable(); len(u) != 4 || !u[0].Since.Equal(start) || u[0].LastErr == "" {
		t.Fatalf("after two: unreachable %+v", u)
	}

	f.setDown(ts[0].Addr, false) // answers
	moved := Target{Key: ts[2].Key, Addr: netip.MustParseAddr("10.9.9.9")}
	want[moved.Key] = moved.Addr
	delete(want, ts[1].Key)
	p.Update([]Target{moved}, []Target{{Key: ts[1].Key}}) // one leaves, one moves
	runRound(p)
	checkPeers(t, p, want)
	if _, ok := p.lost[ts[3].Key]; len(p.lost) != 1 || !ok {
		t.Fatalf("side map %v, want only %s", p.lost, ts[3].Key)
	}
	if s := p.Summary(); s.Targets != 3 || s.Answered != 2 || s.Unreachable != 1 {
		t.Errorf("Summary() = %+v", s)
	}
	if u := p.Unreachable(); len(u) != 1 || u[0].Key != ts[3].Key || !u[0].Since.Equal(start) {
		t.Errorf("Unreachable() = %+v", u)
	}
}

// TestRotationWhilePeersChange: every peer there at the start of a pass is probed within
// the period although peers come and go meanwhile, before and after it in the rotation.
func TestRotationWhilePeersChange(t *testing.T) {
	f := newFakePinger()
	p := New(Config{PerInterval: 4}, f, Hooks{})
	ts := targets(200)
	stay, churn := ts[:100], ts[100:]
	p.Set(stay)
	for len(p.suspects) > 0 {
		runRound(p)
	}
	p.peers.next[rotProber] = 0 // a pass starts now
	rounds := int(p.Summary().Period / time.Second)
	clear(f.sent)
	for i := range rounds {
		// A peer comes and one goes, each round: the same number of peers, the same period.
		in, out := churn[i%len(churn)], churn[(i+len(churn)-1)%len(churn)]
		if i == 0 {
			p.Update([]Target{in}, nil)
		} else {
			p.Update([]Target{in}, []Target{{Key: out.Key}})
		}
		runRound(p)
	}
	for _, tg := range stay {
		if f.sent[tg.Addr] == 0 {
			t.Fatalf("%s not probed in %d rounds (the period)", tg.Key, rounds)
		}
	}
}

// TestPeerSize: the record kept for every peer, by the Prober and its Transport together,
// stays small on 64-bit platforms.
func TestPeerSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are checked on 64-bit platforms")
	}
	if n := unsafe.Sizeof(slot[record]{}); n > 88 {
		t.Errorf("a peer's slot takes %d bytes, more than 88", n)
	}
}

// BenchmarkProberMemory reports what a Prober keeps per peer (B/peer) once it has 20,000
// targets and has started probing them (a round takes the rotation's first pass).
func BenchmarkProberMemory(b *testing.B) {
	heapPerPeer(b, func(ts []Target) any {
		p := New(Config{}, newFakePinger(), Hooks{})
		p.Set(ts)
		p.round()
		return p
	})
}

// heapPerPeer reports the heap in use after build makes its checker for 20,000 targets over
// the heap before, per peer (B/peer): the targets themselves (the caller's, keys included)
// excluded.
func heapPerPeer(b *testing.B, build func([]Target) any) {
	const n = 20000
	ts := targets(n)
	var perPeer float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		kept := build(ts)
		runtime.GC()
		runtime.ReadMemStats(&after)
		perPeer = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(kept)
	}
	b.ReportMetric(perPeer, "B/peer")
}

// BenchmarkProberRound is a round of a Prober with 20,000 peers just set, a few of them
// queued to be probed out of turn, and the probes it sends (answered at once).
func BenchmarkProberRound(b *testing.B) {
	p := New(Config{}, newFakePinger(), Hooks{})
	p.Set(targets(20000))
	for b.Loop() {
		runRound(p)
	}
}

// BenchmarkProbesMemory reports what a Prober and its Transport keep per peer (B/peer) once
// they have 20,000 targets, all checked by the Transport, and have started: the daemon's
// probes of a VXLAN node.
func BenchmarkProbesMemory(b *testing.B) {
	heapPerPeer(b, func(ts []Target) any {
		p := New(Config{}, newFakePinger(), Hooks{})
		tr := p.NewTransport(TransportConfig{MTU: 1450}, newFakeChecker(), TransportHooks{})
		p.Set(ts)
		p.round()
		tr.next()
		return p
	})
}
