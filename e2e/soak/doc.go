// Package soak runs a randomized fault soak of weft (issue 22): a cluster of weftd nodes in
// network namespaces on a three-member etcd (e2e/cluster), vxlan or host-gw, IPv4 or
// dual-stack, pods pinging across every pair of nodes, and faults injected at random and
// overlapping: weftd stopped, killed or frozen (one node or several at once), etcd members
// killed, stopped, frozen, the leader killed or cut off from the others (it keeps its clients)
// and the quorum lost, etcd's history compacted
// away, a node's path to etcd cut, leases churned and hostile leases written, a node's VXLAN
// device or a route deleted, its underlay MTU changed. In Kubernetes mode (Config.Datastore)
// every weftd runs with --kube-subnet-mgr against a kube-apiserver in the underlay on a sole
// etcd member, the leases are the Node objects' annotations, and the faults are Kubernetes
// mode's (Kinds): the API server killed or frozen, Node objects churned, hostile Nodes written,
// a live node's own annotations overwritten with another's public IP or VTEP MAC or with data
// that does not parse, besides weftd's, etcd's, the network's and the node's.
//
// The schedule is a pure function of a seed and a duration (Plan): the same seed replays the
// same faults at the same offsets, and every run prints its seed and its schedule. Invariants
// are checked all along and reported with the seed and the faults in force when they break (see
// Run): pings between pods whose nodes no fault touches are not lost, and neither are those
// between pods whose nodes only faults of weftd (stopped, killed, frozen) or of its path to
// the datastore touch, since the data path must not depend on the daemon running; no node's lease changes
// subnet, public IP or VTEP MAC while it lives (a VXLAN device deleted under a running weftd
// comes back with the same MAC; only one deleted while weftd is down or starting comes back
// with a new one, which the lease then publishes); no two nodes hold one subnet; no node has
// two leases; weftd exits 0 on SIGTERM; a node cut from its datastore (or whose API server is
// down or frozen) says so on /readyz; weftd's memory, goroutines and file descriptors stay
// bounded; no data race or panic in its log; and after each busy phase every node converges,
// within a bound, to exactly the routes, neighbours and FDB entries of the leases in the
// datastore, its own lease naming its address and its device's MAC, with /readyz 200 and
// weft_peers agreeing with the kernel. The machine's own stalls (netlink requests that take
// seconds, as when another's network namespaces are being destroyed) are probed and named
// beside the violations they may explain.
//
// The plan is portable; running it needs Linux and root.
package soak
