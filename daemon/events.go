package daemon

import (
	"log/slog"

	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/subnet"
)

// Events is told what happens to the node that its operator should see. In Kubernetes mode
// it is an *events.Recorder, which posts Events on the node's Node object (`kubectl describe
// node`), folded and rate-limited; in etcd mode nothing is told. Every method returns at once
// and is safe from any goroutine: the daemon's loop never waits on the API server.
type Events interface {
	// LeaseAcquired: the node holds l, at start.
	LeaseAcquired(l subnet.Lease)
	// LeaseChanged: the own lease's subnets or attributes changed from old to l (a renewal
	// found the Node registered again, a device made again has a new MAC).
	LeaseChanged(old, l subnet.Lease)
	// PeerSkipped: the peer lease (or, when its annotations cannot be read, the Node) peer is
	// left out of the data plane; code, a backend.Skip* constant, says why.
	PeerSkipped(code, peer string)
	// Dataplane: the outcome of programming the data plane, nil after a success.
	Dataplane(err error)
	// PeersUnreachable is the overlay probes' hook (called whenever a family's probes see
	// a peer go down or answer again): n peers do not answer through the data plane now (0 when
	// all do), examples names a few of them. It tells the operator when n rises from 0 or
	// grows by half, and when it is back at 0; calls that change nothing worth saying cost
	// nothing.
	PeersUnreachable(n int, examples []string)
	// Notice: something else worth an event (the overlay's transport checks, the transmit
	// checksum offload: daemon.Notice's reasons), a warning or not; each reason is rate
	// limited on its own.
	Notice(warning bool, reason, message string)
	// NoticeAbout is Notice about obj, an object of the cluster other than the Node (a
	// NetworkPolicy weft cannot enforce); rate limited per reason and object.
	NoticeAbout(obj events.Object, warning bool, reason, message string)
}

var _ Events = (*events.Recorder)(nil)

// noEvents is the Events of etcd mode, where there is no Node object to tell.
type noEvents struct{}

func (noEvents) LeaseAcquired(subnet.Lease)                      {}
func (noEvents) Notice(bool, string, string)                     {}
func (noEvents) NoticeAbout(events.Object, bool, string, string) {}
func (noEvents) LeaseChanged(_, _ subnet.Lease)                  {}
func (noEvents) PeerSkipped(_, _ string)                         {}
func (noEvents) Dataplane(error)                                 {}
func (noEvents) PeersUnreachable(_ int, _ []string)              {}

// newEventRecorder is weftd's event recorder in Kubernetes mode: the defaults (at most one
// Event of a reason a minute), failed posts logged to log, every post counted in m.
func newEventRecorder(log *slog.Logger, m *metrics) *events.Recorder {
	for _, reason := range append(events.Reasons(), noticeReasons()...) {
		for _, r := range []string{"success", "error"} {
			m.nodeEvents.WithLabelValues(reason, r)
		}
	}
	return events.New(events.Options{Logger: log, OnPost: func(e events.Event, err error) {
		m.nodeEvents.WithLabelValues(e.Reason, result(err)).Inc()
	}})
}
