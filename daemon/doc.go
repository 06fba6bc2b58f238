// Package daemon is weftd's lifecycle: it reads the network config, picks the external
// interface and public IP, leases the node's subnet, writes subnet.env, and keeps the data
// plane converged to the leases it watches, renewing its own lease, until it is told to stop.
// Stopping leaves everything programmed, so traffic flows on while the daemon restarts.
//
// One goroutine, the loop, owns the node's state: each IP family's peer set and what is
// pending for its data plane (backend.Plane), and the own lease. It alone changes them and
// applies them to the planes. Beside it run the lease watch (subnet.Manager.Watch), which feeds
// it batches of events, the planes' drift watches, the overlay probes and, in Kubernetes mode,
// the recorder of the node's Events, which tells the operator without the loop ever waiting
// on the API server.
//
// What the operator reads (/healthz, /readyz, /status, /metrics; weftctl status asks /status)
// the loop publishes as it changes: a reader takes what was last published and never waits
// for the loop, which may be in the middle of an Apply that takes seconds (20,000 peers on
// Linux) or minutes (through HNS).
package daemon
