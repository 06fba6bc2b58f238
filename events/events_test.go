package events

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/weftnet/weft/subnet"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newClock() *clock { return &clock{t: t0} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// set moves the clock to t0+d.
func (c *clock) set(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t0.Add(d)
	return c.t
}

// summary is an Event in one line, for comparisons: reason, type, count and message.
func summary(evs []Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, fmt.Sprintf("%s %s x%d: %s", e.Reason, e.Type, e.Count, e.Message))
	}
	return out
}

func equal(t *testing.T, when string, got []Event, want ...string) {
	t.Helper()
	g := summary(got)
	if strings.Join(g, "\n") != strings.Join(want, "\n") {
		t.Errorf("%s: Events\n\t%s\nwant\n\t%s", when, strings.Join(g, "\n\t"), strings.Join(want, "\n\t"))
	}
}

// TestFoldsSkips: a storm of skipped peers is one Event, counted by reason with a few
// examples of each, each peer named once.
func TestFoldsSkips(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now})
	for i := range 10 {
		c.set(time.Duration(i) * time.Millisecond)
		r.PeerSkipped("bad_backend_data", fmt.Sprintf("node-%d", i))
	}
	r.PeerSkipped("duplicate_vtep_mac", "10.244.7.0-24")
	r.PeerSkipped("duplicate_vtep_mac", "10.244.7.0-24") // the IPv6 half of the same lease, say
	evs, next := r.due(c.now())
	equal(t, "the storm", evs, "PeerSkipped Warning x12: peer leases skipped: 10 bad_backend_data (e.g. node-0, node-1, node-2), 2 duplicate_vtep_mac (e.g. 10.244.7.0-24)")
	if len(evs) == 1 && (!evs[0].First.Equal(t0) || !evs[0].Last.Equal(t0.Add(9*time.Millisecond))) {
		t.Errorf("first %v, last %v: want the first and the last skip's times", evs[0].First, evs[0].Last)
	}
	if !next.IsZero() {
		t.Errorf("next %v, want none: nothing is held back", next)
	}
	if evs, _ := r.due(c.now()); len(evs) != 0 {
		t.Errorf("posted again: %v", summary(evs))
	}
}

// TestTallyBounded: groups beyond maxGroups are counted, not kept.
func TestTallyBounded(t *testing.T) {
	r := New(Options{Now: newClock().now})
	for i := range maxGroups + 5 {
		r.PeerSkipped(fmt.Sprintf("code%d", i), "")
	}
	evs, _ := r.due(t0)
	if len(evs) != 1 || evs[0].Count != maxGroups+5 || !strings.HasSuffix(evs[0].Message, ", 5 other") {
		t.Errorf("Events %v, want one of %d skips ending in 5 other", summary(evs), maxGroups+5)
	}
}

// TestRateLimit: each reason has its own token bucket; what it holds back is folded into
// the Event posted when the next token is there.
func TestRateLimit(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now}) // a minute, burst 1
	r.Dataplane(errors.New("route 10.244.2.0/24: no such device"))
	evs, _ := r.due(c.now())
	equal(t, "the first failure", evs, "DataplaneError Warning x1: programming the data plane failed, retrying: route 10.244.2.0/24: no such device")

	for i := 1; i <= 30; i++ { // the loop retries every second
		c.set(time.Duration(i) * time.Second)
		r.Dataplane(fmt.Errorf("attempt %d", i))
		if evs, next := r.due(c.now()); len(evs) != 0 || !next.Equal(t0.Add(time.Minute)) {
			t.Fatalf("failure %d: posted %v, next %v; want nothing before %v", i, summary(evs), next, t0.Add(time.Minute))
		}
	}
	c.set(10 * time.Second)
	r.LeaseAcquired(subnet.Lease{Subnet: netip.MustParsePrefix("10.244.1.0/24"), Attrs: subnet.LeaseAttrs{BackendType: "host-gw", BackendData: []byte("null")}})
	evs, _ = r.due(c.now())
	equal(t, "another reason", evs, "LeaseAcquired Normal x1: lease acquired: subnet 10.244.1.0/24, backend host-gw")

	evs, _ = r.due(c.set(time.Minute))
	equal(t, "a minute on", evs, "DataplaneError Warning x30: programming the data plane failed, retrying: attempt 30")
	if len(evs) == 1 && (!evs[0].First.Equal(t0.Add(time.Second)) || !evs[0].Last.Equal(t0.Add(30*time.Second))) {
		t.Errorf("first %v, last %v: want the held failures' times", evs[0].First, evs[0].Last)
	}

	// A quiet hour fills the bucket to its burst, one token: one Event at once, the next a
	// minute later.
	c.set(time.Hour)
	r.Dataplane(errors.New("a"))
	evs, _ = r.due(c.now())
	r.Dataplane(errors.New("b"))
	more, next := r.due(c.now())
	if len(evs) != 1 || len(more) != 0 || !next.Equal(t0.Add(time.Hour+time.Minute)) {
		t.Errorf("after an hour: %v then %v, next %v; want one Event, then none until a minute on", summary(evs), summary(more), next)
	}
}

// TestBurst: a bucket of Burst tokens posts that many at once, then one per Interval.
func TestBurst(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now, Interval: 10 * time.Second, Burst: 3})
	var posted []int
	for s := range 40 {
		c.set(time.Duration(s) * time.Second)
		r.PeerSkipped("no_subnet", "")
		if evs, _ := r.due(c.now()); len(evs) > 0 {
			posted = append(posted, s)
		}
	}
	if want := []int{0, 1, 2, 10, 20, 30}; fmt.Sprint(posted) != fmt.Sprint(want) {
		t.Errorf("posted at seconds %v, want %v", posted, want)
	}
}

// TestOrder: Events due together are posted in the order their last occurrences happened,
// so that a recovery held back comes after the failure held back with it.
func TestOrder(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now})
	r.Dataplane(errors.New("first"))
	r.Dataplane(nil)
	evs, _ := r.due(c.now())
	equal(t, "a failure and its recovery", evs,
		"DataplaneError Warning x1: programming the data plane failed, retrying: first",
		"DataplaneRecovered Normal x1: the data plane is programmed again, after 1 failed attempts over 0s")
	c.set(5 * time.Second)
	r.Dataplane(errors.New("second"))
	c.set(7 * time.Second)
	r.Dataplane(errors.New("third"))
	c.set(9 * time.Second)
	r.Dataplane(nil)
	c.set(20 * time.Second)
	r.Dataplane(nil) // no failure since: nothing to say
	evs, _ = r.due(c.set(2 * time.Minute))
	equal(t, "both held", evs,
		"DataplaneError Warning x2: programming the data plane failed, retrying: third",
		"DataplaneRecovered Normal x1: the data plane is programmed again, after 2 failed attempts over 4s")
}

// TestPeersUnreachable: the prober's count becomes an Event when it rises from 0 or grows by
// half, and PeersReachable when it is back at 0; other rounds say nothing.
func TestPeersUnreachable(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now})
	for i, step := range []struct {
		n    int
		want string
	}{
		{0, ""},
		{2, "PeersUnreachable Warning x1: peers unreachable over the overlay: 2 (e.g. n0, n1)"},
		{2, ""},
		{3, "PeersUnreachable Warning x1: peers unreachable over the overlay: 3 (e.g. n0, n1, n2)"},
		{4, ""},
		{5, "PeersUnreachable Warning x1: peers unreachable over the overlay: 5 (e.g. n0, n1, n2)"},
		{1, ""}, // fewer: growth counts from here
		{2, "PeersUnreachable Warning x1: peers unreachable over the overlay: 2 (e.g. n0, n1)"},
		{0, "PeersReachable Normal x1: every peer is reachable over the overlay again"},
		{0, ""},
	} {
		var ex []string
		for j := range step.n {
			ex = append(ex, fmt.Sprintf("n%d", j))
		}
		r.PeersUnreachable(step.n, ex)
		evs, _ := r.due(c.set(time.Duration(i) * time.Hour)) // a token every time
		var want []string
		if step.want != "" {
			want = []string{step.want}
		}
		equal(t, fmt.Sprintf("round %d (%d unreachable)", i, step.n), evs, want...)
	}
}

// TestLeaseChanged: a new subnet is a Warning, new attributes only are not.
func TestLeaseChanged(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now})
	old := subnet.Lease{Subnet: netip.MustParsePrefix("10.244.1.0/24"), IPv6Subnet: netip.MustParsePrefix("fd00:1::/64"),
		Attrs: subnet.LeaseAttrs{PublicIP: netip.MustParseAddr("192.0.2.10"), PublicIPv6: netip.MustParseAddr("fd77::10"),
			BackendType: "vxlan", BackendData: []byte(`{"VNI":1,"VtepMAC":"0e:00:00:00:00:01"}`), BackendV6Data: []byte(`{"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`)}}
	mac := old
	mac.Attrs.BackendData = []byte(`{"VNI":1,"VtepMAC":"0e:00:00:00:00:03"}`)
	r.LeaseChanged(old, mac)
	evs, _ := r.due(c.now())
	equal(t, "a new MAC", evs, `LeaseChanged Normal x1: lease changed from subnet 10.244.1.0/24, IPv6 subnet fd00:1::/64, public IP 192.0.2.10, public IPv6 fd77::10, backend vxlan {"VNI":1,"VtepMAC":"0e:00:00:00:00:01"} {"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`+
		` to subnet 10.244.1.0/24, IPv6 subnet fd00:1::/64, public IP 192.0.2.10, public IPv6 fd77::10, backend vxlan {"VNI":1,"VtepMAC":"0e:00:00:00:00:03"} {"VNI":1,"VtepMAC":"0e:00:00:00:00:02"}`)
	moved := old
	moved.Subnet, moved.IPv6Subnet = netip.MustParsePrefix("10.244.9.0/24"), netip.Prefix{}
	r.LeaseChanged(old, moved)
	evs, _ = r.due(c.set(time.Hour))
	if len(evs) != 1 || evs[0].Type != Warning || !strings.Contains(evs[0].Message, "to subnet 10.244.9.0/24, public IP") ||
		!strings.HasSuffix(evs[0].Message, ": pods on the old subnet lose connectivity until they restart") {
		t.Errorf("a new subnet: %v, want a Warning saying pods lose connectivity", summary(evs))
	}
}

// TestMessageBounded: a long error is cut to MaxMessage bytes on a character boundary.
func TestMessageBounded(t *testing.T) {
	r := New(Options{Now: newClock().now})
	r.Dataplane(errors.New(strings.Repeat("é", MaxMessage)))
	evs, _ := r.due(t0)
	if len(evs) != 1 {
		t.Fatalf("Events %v", summary(evs))
	}
	m := evs[0].Message
	if len(m) > MaxMessage || !strings.HasSuffix(m, "é...") {
		t.Errorf("message of %d bytes ending %q, want at most %d ending in a whole é and ...", len(m), m[len(m)-8:], MaxMessage)
	}
}

// TestRun: Run posts what is due at once, what is held back when its token comes, goes on
// past a failed post (reported to OnPost), and ends with its context; recording never waits
// for a post, even one that hangs.
func TestRun(t *testing.T) {
	type outcome struct {
		e   Event
		err error
	}
	outcomes := make(chan outcome, 100)
	interval := 200 * time.Millisecond
	r := New(Options{Interval: interval, Timeout: time.Second, OnPost: func(e Event, err error) { outcomes <- outcome{e, err} }})
	entered, block := make(chan struct{}), make(chan struct{})
	sink := func(ctx context.Context, e Event) error {
		if e.Reason == ReasonLeaseAcquired {
			return errors.New("refused")
		}
		if e.Reason == ReasonPeersUnreachable {
			close(entered)
			select {
			case <-block:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, sink)
	}()
	next := func(what string) outcome {
		t.Helper()
		select {
		case o := <-outcomes:
			return o
		case <-time.After(5 * time.Second):
			t.Fatalf("no post of %s", what)
			return outcome{}
		}
	}

	start := time.Now()
	r.PeerSkipped("no_subnet", "a")
	if o := next("the first skip"); o.e.Count != 1 || o.err != nil {
		t.Errorf("first post: %+v", o)
	}
	r.PeerSkipped("no_subnet", "b")
	r.PeerSkipped("no_subnet", "c")
	o := next("the skips held back")
	if took := time.Since(start); o.e.Count != 2 || took < interval {
		t.Errorf("second post %+v after %v; want both skips folded, a token (%v) after the first", o.e, took, interval)
	}

	r.LeaseAcquired(subnet.Lease{})
	if o := next("a refused Event"); o.err == nil || o.e.Reason != ReasonLeaseAcquired {
		t.Errorf("refused post: %+v", o)
	}

	// A post that hangs holds up no caller.
	r.PeersUnreachable(1, nil)
	<-entered
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		for i := range 10000 {
			r.PeerSkipped("no_subnet", fmt.Sprint(i))
		}
	}()
	select {
	case <-recorded:
	case <-time.After(5 * time.Second):
		t.Fatal("recording waited for a post")
	}
	close(block)
	next("the post that hung")
	if o := next("the skips recorded meanwhile"); o.e.Count != 10000 {
		t.Errorf("skips while a post hung: %+v, want 10000 in one Event", o.e)
	}

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not end with its context")
	}
}

// TestConcurrent: occurrences recorded from many goroutines while Run posts are all counted,
// in few Events.
func TestConcurrent(t *testing.T) {
	var mu sync.Mutex
	total, posts := 0, 0
	r := New(Options{Interval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.Run(ctx, func(_ context.Context, e Event) error {
			mu.Lock()
			defer mu.Unlock()
			total += e.Count
			posts++
			return nil
		})
	}()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				r.PeerSkipped("bad_public_ip", fmt.Sprintf("%d-%d", g, i))
			}
		})
	}
	wg.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		got, n := total, posts
		mu.Unlock()
		if got == 4000 {
			t.Logf("4000 skips in %d Events", n)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d skips posted in %d Events, want 4000", got, n)
		}
	}
	cancel()
	<-done
}

// TestNoticeAbout: an Event about another object carries it, is folded and rate limited per
// object (two policies refused at once are two Events, and neither waits for the Node's Event
// of the same reason); past maxObjects waiting, one more object's occurrence goes into the
// Node's Event; an object's bucket goes once it is full again.
func TestNoticeAbout(t *testing.T) {
	c := newClock()
	r := New(Options{Now: c.now})
	a := Object{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Namespace: "shop", Name: "a", UID: "uid-a"}
	b := Object{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Namespace: "shop", Name: "b", UID: "uid-b"}
	r.NoticeAbout(a, true, "PolicyRefused", "a refused")
	r.NoticeAbout(a, true, "PolicyRefused", "a refused again")
	r.NoticeAbout(b, true, "PolicyRefused", "b refused")
	r.Notice(true, "PolicyRefused", "on the node")
	evs, _ := r.due(c.now())
	equal(t, "two objects and the Node", evs,
		"PolicyRefused Warning x2: a refused again", "PolicyRefused Warning x1: b refused", "PolicyRefused Warning x1: on the node")
	want := []Object{a, b, {}}
	for i, e := range evs {
		if i < len(want) && e.Regarding != want[i] {
			t.Errorf("Event %d regards %+v, want %+v", i, e.Regarding, want[i])
		}
	}

	// Rate limited per object: a's next Event waits for its token, b's is not held by it.
	c.set(time.Second)
	r.NoticeAbout(a, true, "PolicyRefused", "a once more")
	if evs, next := r.due(c.now()); len(evs) != 0 || !next.Equal(t0.Add(DefaultInterval)) {
		t.Errorf("a within its interval: %v, next %v; want nothing before %v", summary(evs), next, t0.Add(DefaultInterval))
	}
	c.set(DefaultInterval)
	equal(t, "a after its interval", mustDue(r, c.now()), "PolicyRefused Warning x1: a once more")

	// Bounded: maxObjects objects waiting, one more goes into the Node's Event.
	c.set(10 * DefaultInterval)
	for i := range maxObjects + 1 {
		r.NoticeAbout(Object{Kind: "NetworkPolicy", Namespace: "n", Name: fmt.Sprint(i)}, true, "PolicyRefused", fmt.Sprint("refused ", i))
	}
	if len(r.pending) != maxObjects+1 || r.objects != maxObjects {
		t.Errorf("%d Events waiting, %d about objects; want %d and %d", len(r.pending), r.objects, maxObjects+1, maxObjects)
	}
	evs = mustDue(r, c.now())
	node := 0
	for _, e := range evs {
		if e.Regarding == (Object{}) {
			node++
			if e.Message != fmt.Sprint("refused ", maxObjects) {
				t.Errorf("the Node's Event says %q, want the occurrence past the bound", e.Message)
			}
		}
	}
	if len(evs) != maxObjects+1 || node != 1 {
		t.Errorf("%d Events, %d about the Node; want %d and 1", len(evs), node, maxObjects+1)
	}
	// Once every object's bucket is full again they are gone; the Node's reasons stay.
	c.set(20 * DefaultInterval)
	mustDue(r, c.now())
	for k := range r.buckets {
		if k.obj != (Object{}) {
			t.Errorf("bucket of %+v kept with nothing waiting and full credit", k.obj)
		}
	}
	if r.objects != 0 {
		t.Errorf("objects = %d with nothing waiting", r.objects)
	}
}

// mustDue is r.due's Events at now.
func mustDue(r *Recorder, now time.Time) []Event {
	evs, _ := r.due(now)
	return evs
}
