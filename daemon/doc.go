// Package daemon is weftd's lifecycle: it reads the network config, picks the external
// interface and public IP, leases the node's subnet, writes subnet.env, and keeps the data
// plane converged to the leases it watches, renewing its own lease, until it is told to stop.
// Stopping leaves everything programmed, so traffic flows on while the daemon restarts.
//
// One goroutine, the loop, owns the node's state: the own lease, and one data path per IP
// family (familyPath: its peer set, what is pending for its data plane, the plane and what
// watches it). It alone drives them: it tells each path of the lease events and of changes to
// the own lease, and has it apply what is pending. Beside it run the lease watch (subnet.Manager.Watch), which feeds
// it batches of events, the planes' drift watches, the overlay probes and, in Kubernetes mode,
// the recorder of the node's Events, which tells the operator without the loop ever waiting
// on the API server.
//
// What the operator reads (/healthz, /readyz, /status, /metrics; weftctl status asks /status)
// the loop publishes as it changes: a reader takes what was last published and never waits
// for the loop, which may be in the middle of an Apply that takes seconds (20,000 peers on
// Linux) or minutes (through HNS).
package daemon
