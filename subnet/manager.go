package subnet

import (
	"context"
	"errors"
	"net/netip"
)

// ErrNotSupported is returned by a Manager for an operation its datastore does not have
// (a Kubernetes node cannot release its podCIDR).
var ErrNotSupported = errors.New("not supported by this datastore")

// Manager is the datastore seam: it hands out the node's lease and tells of everyone's.
// Implementations are safe for concurrent use by one node.
type Manager interface {
	// GetConfig returns the validated network configuration.
	GetConfig(ctx context.Context) (*Config, error)
	// Acquire leases a subnet for this node and publishes attrs with it. A node keeps its
	// subnet: the lease that already carries its public IP is reused, else req.Previous
	// if it is free, else a free one is picked. ErrOutOfSubnets when none is left.
	Acquire(ctx context.Context, req AcquireRequest) (Lease, error)
	// Renew extends the node's lease. If the lease was lost (expired, revoked, deleted)
	// it is acquired again, on the same subnet if still free: callers compare the
	// returned lease with the one they had to see whether anything changed.
	Renew(ctx context.Context, own Lease) (Lease, error)
	// Watch sends batches of lease events until ctx is done: first every lease as EventAdded
	// as of one moment at or after the last Acquire (a manager may start from the listing its
	// Acquire made, with the acquired lease in it), in one whole batch (always sent, maybe
	// empty), which partial batches may come before (Batch.Partial); then every change since
	// that moment. A gap in the datastore's history is bridged by sending the difference. It
	// returns ctx's error, or an error that makes going on pointless.
	Watch(ctx context.Context, out chan<- Batch) error
	// Release gives the lease back. ErrNotSupported where the datastore has no such thing.
	Release(ctx context.Context, own Lease) error
}

// AcquireRequest is what a node asks for.
type AcquireRequest struct {
	Attrs LeaseAttrs
	// Previous and PreviousIPv6 are the subnets the node had before (from its subnet.env),
	// tried first when the datastore holds no lease for the node.
	Previous     netip.Prefix
	PreviousIPv6 netip.Prefix
	// Prepare, when set, is called once the subnets are chosen and before the lease is
	// published; the attributes it returns are published instead of Attrs (the public IPs
	// must stay the same). A data plane that can only make its device for a known subnet
	// (HNS) creates it here and publishes the device's MAC with the one acquisition. It is
	// called again, for the new subnets, if the ones it was given were lost to a race. held
	// is what the datastore already holds for the node on those subnets (its lease as
	// published before a restart; zero for a new lease), so that a device made again can
	// keep what the peers were told (its VXLAN MAC).
	Prepare func(ctx context.Context, sn, sn6 netip.Prefix, held LeaseAttrs) (LeaseAttrs, error)
}

// EventType says whether a lease appeared (or changed) or went away.
type EventType int

const (
	// EventAdded is a new lease or a new version of one.
	EventAdded EventType = iota
	// EventRemoved is a lease that is gone: deleted, expired or released.
	EventRemoved
)

func (t EventType) String() string {
	switch t {
	case EventAdded:
		return "added"
	case EventRemoved:
		return "removed"
	}
	return "unknown"
}

// Event is a change of one lease. For EventRemoved only the Lease's subnets are set (its Key
// names it): watchers keep a digest of each lease's attributes, not a copy of the lease, and
// the receiver, which was told of the lease when it was added, has the rest.
type Event struct {
	Type  EventType
	Lease Lease
	// Key is the Lease's Key, where the watcher holds it as a string already (empty: it does
	// not), so that the receivers keep that string rather than each a copy of their own.
	Key string
}

// LeaseKey is the key of the event's lease.
func (e Event) LeaseKey() string {
	if e.Key != "" {
		return e.Key
	}
	return e.Lease.Key()
}

// Batch is what a Watch sends at once: lease events, to be taken in order.
type Batch struct {
	Events []Event
	// Partial marks a batch of the first listing that more of it follows: a datastore that
	// streams its listing (the Kubernetes API) sends what came so far while the rest comes,
	// so that the receiver takes those leases meanwhile. Until the whole batch that ends the
	// listing, what the receiver holds is not every lease: a lease it does not hold yet is
	// not gone, and nothing is to be removed for being absent. Only batches before the first
	// whole one are partial; they may remove a lease an earlier one added.
	Partial bool
}

// Sender delivers one Watch's batches to its receiver as Manager.Watch promises: the first
// whole batch goes out even when empty (the receiver then knows every lease, though there are
// none), an empty one after it is dropped, as is an empty partial one.
type Sender struct {
	Out  chan<- Batch
	sent bool // the first whole batch went out
}

// Send delivers evs on Out as a whole batch, unless it is empty and not the first, waiting
// for the receiver until ctx is done.
func (s *Sender) Send(ctx context.Context, evs []Event) error {
	if len(evs) == 0 && s.sent {
		return nil
	}
	if err := s.send(ctx, Batch{Events: evs}); err != nil {
		return err
	}
	s.sent = true
	return nil
}

// SendPartial delivers evs on Out as a partial batch of the first listing, unless it is
// empty. It is an error once the first whole batch went out.
func (s *Sender) SendPartial(ctx context.Context, evs []Event) error {
	if s.sent {
		return errors.New("a partial batch after the first listing's whole one")
	}
	if len(evs) == 0 {
		return nil
	}
	return s.send(ctx, Batch{Events: evs, Partial: true})
}

func (s *Sender) send(ctx context.Context, b Batch) error {
	select {
	case s.Out <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrNoConfig is returned by GetConfig while the datastore holds no network configuration.
var ErrNoConfig = errors.New("no network configuration")

// The optional parts of a Manager, which the daemon asks for with a type assertion.

// Checker is implemented by Managers that can tell, without a request, whether their
// datastore is reachable now. The daemon's readiness uses it.
type Checker interface {
	Check() error
}

// Prober is implemented by Managers that can ask their datastore, with one small request,
// whether it answers now: what Checker cannot see, a datastore that keeps the connection open
// and answers nothing (a frozen process, a path that drops packets), shows as a Probe that
// runs out of ctx's deadline. The daemon's readiness probes every few seconds.
type Prober interface {
	Probe(ctx context.Context) error
}

// Readier is implemented by Managers whose datastore wants to hear that the node's pod
// network works (Kubernetes: the Node's NetworkUnavailable condition False). The daemon calls
// SetReady once the data plane has first converged, and after each convergence while it
// fails; until then the node keeps whatever it had.
type Readier interface {
	SetReady(ctx context.Context) error
}

// PoolUsage is how much of one family's subnet range (Config.IPv4Range, IPv6Range) is
// leased.
type PoolUsage struct {
	IPv6   bool
	Total  uint64 // the range's subnets
	Leased uint64 // those that hold a lease, whatever its value
}

// PoolReporter is implemented by Managers that hand out the subnets themselves (etcd; in
// Kubernetes, kube-controller-manager does): it tells how much of the pool is leased, as of
// the watch's last batch. Nil before the watch's first batch.
type PoolReporter interface {
	Pool() []PoolUsage
}
