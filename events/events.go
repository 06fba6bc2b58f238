// Package events tells a node's operator what happens to the node's network, as Events on
// its Kubernetes Node object (`kubectl describe node`): the lease acquired or changed, peer
// leases skipped, the data plane failing and programmed again, overlay peers unreachable and
// reachable again; and, as Events on another object of the cluster (NoticeAbout), what
// concerns that object: a NetworkPolicy weft cannot enforce as written
// (`kubectl describe networkpolicy`).
//
// A Recorder takes occurrences as they happen and posts few Events. The occurrences of one
// reason that arrive while that reason may not post are folded into its next Event: a count,
// the first and last time, and for skipped peers how many of each kind with a few examples.
// Each reason has a token bucket (each reason and object, for an Event about another object):
// Burst Events at once, then one more per Interval. Posting
// runs on a goroutine of its own (Run), so a caller never waits for the API server, and what
// waits to be posted takes a bounded amount of memory whatever the storm.
package events

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/weftnet/weft/subnet"
)

// Types of Event, as core/v1 names them.
const (
	Normal  = "Normal"
	Warning = "Warning"
)

// Reasons of the Events a Recorder posts.
const (
	ReasonLeaseAcquired      = "LeaseAcquired"
	ReasonLeaseChanged       = "LeaseChanged"
	ReasonPeerSkipped        = "PeerSkipped"
	ReasonDataplaneError     = "DataplaneError"
	ReasonDataplaneRecovered = "DataplaneRecovered"
	ReasonPeersUnreachable   = "PeersUnreachable"
	ReasonPeersReachable     = "PeersReachable"
)

// Reasons lists the Reason* constants, for counters that start each at zero.
func Reasons() []string {
	return []string{ReasonLeaseAcquired, ReasonLeaseChanged, ReasonPeerSkipped, ReasonDataplaneError,
		ReasonDataplaneRecovered, ReasonPeersUnreachable, ReasonPeersReachable}
}

// Defaults of Options.
const (
	DefaultInterval = time.Minute
	DefaultBurst    = 1
	DefaultTimeout  = 10 * time.Second
)

// What one Event may say.
const (
	// MaxMessage is the longest message posted, in bytes: the limit of the note of an
	// events.k8s.io Event, which is the same object as a core/v1 Event.
	MaxMessage = 1024
	// maxExamples is how many members of a group an Event names.
	maxExamples = 3
	// maxGroups is how many groups an Event tallies apart; members of more are counted as
	// "other" (the callers' groups are a small fixed set: this bounds memory all the same).
	maxGroups = 16
	// maxObjects is how many objects other than the Node may have an Event waiting at once;
	// an occurrence about one more is folded into the Node's Event of its reason instead.
	maxObjects = 64
)

// Object is what an Event is about when it is not the node's own Node: an object of the
// cluster, named as a core/v1 ObjectReference names it. The zero Object is the Node.
type Object struct {
	APIVersion, Kind, Namespace, Name, UID string
}

// Event is what a Sink posts: the occurrences of one reason since the last Event of that
// reason, folded into one.
type Event struct {
	Type    string // Normal or Warning
	Reason  string // one of the Reason* constants
	Message string
	// Count is how many occurrences the Event stands for, at least 1; First and Last are
	// when the first and the last of them happened.
	Count       int
	First, Last time.Time
	// Regarding is the object the Event is about; zero: the node's Node.
	Regarding Object
}

// Sink posts an Event: weftd's makes it a core/v1 Event that kube.Manager.PostEvent creates
// about the node's Node, or about the Event's Regarding object.
type Sink func(ctx context.Context, e Event) error

// Options tune a Recorder; the zero value is the defaults.
type Options struct {
	// Interval is how often a reason's bucket gains a token: DefaultInterval when zero.
	Interval time.Duration
	// Burst is how many tokens a reason's bucket holds, and so how many Events of one reason
	// may be posted at once after a quiet time: DefaultBurst when zero.
	Burst int
	// Timeout bounds one post: DefaultTimeout when zero.
	Timeout time.Duration
	// Logger hears of posts that failed; none when nil.
	Logger *slog.Logger
	// OnPost, if set, is called after each post with its outcome (metrics hook in here).
	OnPost func(e Event, err error)
	// Now is the clock: time.Now when nil.
	Now func() time.Time
}

// Recorder turns occurrences into few Events. Its methods are safe for concurrent use and
// return at once; Run posts.
type Recorder struct {
	opts Options
	wake chan struct{} // a token: something was recorded

	mu      sync.Mutex
	buckets map[key]*bucket  // a reason's, or a reason's about an object
	pending map[key]*pending // occurrences not posted yet
	objects int              // keys of pending about an object other than the Node
	seq     uint64           // occurrences recorded so far: their order
	// failures counts the data plane's failures since it last worked, the first at
	// failingSince.
	failures     int
	failingSince time.Time
	// unreachable is how many peers were unreachable at the last PeersUnreachable Event, or
	// fewer if the count fell since: growth is measured from there. 0: none is.
	unreachable int
}

// New returns a Recorder that posts nothing until Run is called.
func New(opts Options) *Recorder {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Burst <= 0 {
		opts.Burst = DefaultBurst
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Recorder{opts: opts, wake: make(chan struct{}, 1), buckets: map[key]*bucket{}, pending: map[key]*pending{}}
}

// key is what occurrences are folded and rate limited by: their reason and their object.
type key struct {
	reason string
	obj    Object
}

// LeaseAcquired records that the node holds l, at start.
func (r *Recorder) LeaseAcquired(l subnet.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Normal, ReasonLeaseAcquired, "lease acquired: "+describe(l), "", "")
}

// LeaseChanged records that the own lease changed from old to l. A new subnet is a Warning:
// pods on the old one lose connectivity until they restart.
func (r *Recorder) LeaseChanged(old, l subnet.Lease) {
	typ, msg := Normal, "lease changed from "+describe(old)+" to "+describe(l)
	if !l.SameSubnets(old) {
		typ, msg = Warning, msg+": pods on the old subnet lose connectivity until they restart"
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(typ, ReasonLeaseChanged, msg, "", "")
}

// PeerSkipped records that the peer lease (or node) peer is left out of the data plane, code
// (a backend.Skip* constant) saying why. The Event tallies the skips by code.
func (r *Recorder) PeerSkipped(code, peer string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(Warning, ReasonPeerSkipped, "peer leases skipped", code, peer)
}

// Dataplane records the outcome of programming the data plane: an error is a DataplaneError
// Event; the first success after errors a DataplaneRecovered one.
func (r *Recorder) Dataplane(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.opts.Now()
	if err != nil {
		if r.failures == 0 {
			r.failingSince = now
		}
		r.failures++
		r.record(Warning, ReasonDataplaneError, "programming the data plane failed, retrying: "+err.Error(), "", "")
		return
	}
	if r.failures == 0 {
		return
	}
	msg := fmt.Sprintf("the data plane is programmed again, after %d failed attempts over %s",
		r.failures, now.Sub(r.failingSince).Round(time.Second))
	r.failures = 0
	r.record(Normal, ReasonDataplaneRecovered, msg, "", "")
}

// Notice records an event of another reason (the daemon's notices: the overlay's transport
// checks, transmit checksum offload), a Warning or a Normal one, rate limited per reason as
// the others.
func (r *Recorder) Notice(warning bool, reason, msg string) {
	r.NoticeAbout(Object{}, warning, reason, msg)
}

// NoticeAbout records an event of another reason about obj (the zero Object: the Node, as
// Notice), rate limited per reason and object. While maxObjects other objects have Events
// waiting, it is folded into the Node's Event of the reason instead, so that memory stays
// bounded whatever the storm.
func (r *Recorder) NoticeAbout(obj Object, warning bool, reason, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	typ := Normal
	if warning {
		typ = Warning
	}
	k := key{reason: reason, obj: obj}
	if _, waiting := r.pending[k]; obj != (Object{}) && !waiting && r.objects >= maxObjects {
		k.obj = Object{}
	}
	r.recordKey(k, typ, msg, "", "")
}

// PeersUnreachable records what the overlay prober found in a round: n peers it could not
// reach over the overlay, a few of them in examples. It is a Warning when n rises from 0 or
// grows by half or more since the last one; a Normal PeersReachable when n is back at 0.
func (r *Recorder) PeersUnreachable(n int, examples []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case n <= 0:
		if r.unreachable > 0 {
			r.unreachable = 0
			r.record(Normal, ReasonPeersReachable, "every peer is reachable over the overlay again", "", "")
		}
	case r.unreachable == 0 || n >= r.unreachable+(r.unreachable+1)/2:
		r.unreachable = n
		msg := fmt.Sprintf("peers unreachable over the overlay: %d", n)
		if len(examples) > 0 {
			msg += " (e.g. " + strings.Join(examples[:min(len(examples), maxExamples)], ", ") + ")"
		}
		r.record(Warning, ReasonPeersUnreachable, msg, "", "")
	case n < r.unreachable:
		r.unreachable = n
	}
}

// record folds an occurrence into the reason's pending Event about the Node, tallying it
// under group when group is set, and wakes Run. r.mu is held.
func (r *Recorder) record(typ, reason, msg, group, example string) {
	r.recordKey(key{reason: reason}, typ, msg, group, example)
}

// recordKey is record for the pending Event of k.
func (r *Recorder) recordKey(k key, typ, msg, group, example string) {
	now := r.opts.Now()
	p := r.pending[k]
	if p == nil {
		p = &pending{first: now}
		r.pending[k] = p
		if k.obj != (Object{}) {
			r.objects++
		}
	}
	r.seq++
	p.typ, p.msg, p.last, p.seq = typ, msg, now, r.seq
	p.count++
	if group != "" {
		p.tally(group, example)
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run posts the Events due through sink, one at a time, until ctx is done; what is still held
// back then is dropped. Call it once.
func (r *Recorder) Run(ctx context.Context, sink Sink) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		evs, next := r.due(r.opts.Now())
		for _, e := range evs {
			if ctx.Err() != nil {
				return
			}
			r.post(ctx, sink, e)
		}
		if next.IsZero() {
			timer.Stop()
		} else {
			timer.Reset(next.Sub(r.opts.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

func (r *Recorder) post(ctx context.Context, sink Sink, e Event) {
	pctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	err := sink(pctx, e)
	cancel()
	if r.opts.OnPost != nil {
		r.opts.OnPost(e, err)
	}
	if err != nil && ctx.Err() == nil {
		r.opts.Logger.Warn("posting an event on the node failed; it is dropped", "reason", e.Reason, "count", e.Count, "err", err)
	}
}

// due takes the pending Events whose reason has a token at now, in the order of their last
// occurrence, and says when the next of those held back will have one (zero: none is held).
func (r *Recorder) due(now time.Time) ([]Event, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ready []*pending
	var next time.Time
	full := time.Duration(r.opts.Burst) * r.opts.Interval
	for k, p := range r.pending {
		b := r.buckets[k]
		if b == nil {
			b = &bucket{credit: full, at: now}
			r.buckets[k] = b
		}
		b.refill(now, full)
		if b.credit >= r.opts.Interval {
			b.credit -= r.opts.Interval
			p.key = k
			ready = append(ready, p)
			delete(r.pending, k)
			if k.obj != (Object{}) {
				r.objects--
			}
			continue
		}
		if at := b.at.Add(r.opts.Interval - b.credit); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	// An object's bucket that is full again, with nothing waiting, is as a new one would be:
	// it goes, so that buckets do not pile up with the objects ever told about.
	for k, b := range r.buckets {
		if _, waiting := r.pending[k]; k.obj != (Object{}) && !waiting {
			if b.refill(now, full); b.credit >= full {
				delete(r.buckets, k)
			}
		}
	}
	// In the order of their last occurrences.
	slices.SortFunc(ready, func(a, b *pending) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]Event, 0, len(ready))
	for _, p := range ready {
		out = append(out, p.event(p.key))
	}
	return out, next
}

// bucket is a key's token bucket, kept as time: a token is an Interval's worth of credit,
// so that refilling is exact and a wait computed from it ends with a whole token.
type bucket struct {
	credit time.Duration
	at     time.Time // when credit was last brought up to date
}

// refill adds the credit earned since b.at, up to full.
func (b *bucket) refill(now time.Time, full time.Duration) {
	if now.After(b.at) {
		b.credit = min(full, b.credit+now.Sub(b.at))
		b.at = now
	}
}

// pending is the occurrences of one key not posted yet.
type pending struct {
	typ, msg    string // the last occurrence's
	key         key    // set when it is due
	count       int
	first, last time.Time
	seq         uint64  // of the last occurrence among all reasons' (times can be equal)
	groups      []group // in the order first seen
	other       int     // occurrences of groups beyond maxGroups
}

// group is the occurrences of one kind within a pending Event (the peers skipped for one
// reason), with a few of their subjects.
type group struct {
	name     string
	n        int
	examples []string
}

func (p *pending) tally(name, example string) {
	i := slices.IndexFunc(p.groups, func(g group) bool { return g.name == name })
	if i < 0 {
		if len(p.groups) == maxGroups {
			p.other++
			return
		}
		p.groups = append(p.groups, group{name: name})
		i = len(p.groups) - 1
	}
	g := &p.groups[i]
	g.n++
	if example != "" && len(g.examples) < maxExamples && !slices.Contains(g.examples, example) {
		g.examples = append(g.examples, example)
	}
}

// event is the Event p stands for: the last message, followed by the tally if there is one,
// e.g. "peer leases skipped: 10 bad_backend_data (e.g. a, b, c), 2 duplicate_vtep_mac (e.g. d)".
func (p *pending) event(k key) Event {
	msg := p.msg
	if len(p.groups) > 0 {
		parts := make([]string, 0, len(p.groups)+1)
		for _, g := range p.groups {
			s := fmt.Sprintf("%d %s", g.n, g.name)
			if len(g.examples) > 0 {
				s += " (e.g. " + strings.Join(g.examples, ", ") + ")"
			}
			parts = append(parts, s)
		}
		if p.other > 0 {
			parts = append(parts, fmt.Sprintf("%d other", p.other))
		}
		msg += ": " + strings.Join(parts, ", ")
	}
	return Event{Type: p.typ, Reason: k.reason, Message: truncate(msg, MaxMessage), Count: p.count, First: p.first, Last: p.last,
		Regarding: k.obj}
}

// truncate cuts s to at most n bytes, on a character boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const cut = "..."
	i := n - len(cut)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + cut
}

// describe says what a lease holds, for a message.
func describe(l subnet.Lease) string {
	var parts []string
	if l.Subnet.IsValid() {
		parts = append(parts, "subnet "+l.Subnet.String())
	}
	if l.IPv6Subnet.IsValid() {
		parts = append(parts, "IPv6 subnet "+l.IPv6Subnet.String())
	}
	if l.Attrs.PublicIP.IsValid() {
		parts = append(parts, "public IP "+l.Attrs.PublicIP.String())
	}
	if l.Attrs.PublicIPv6.IsValid() {
		parts = append(parts, "public IPv6 "+l.Attrs.PublicIPv6.String())
	}
	b := "backend " + l.Attrs.BackendType
	for _, d := range [][]byte{l.Attrs.BackendData, l.Attrs.BackendV6Data} {
		if len(d) > 0 && string(d) != "null" {
			b += " " + string(d)
		}
	}
	return strings.Join(append(parts, b), ", ")
}
