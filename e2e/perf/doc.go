// Package perf is weft's black-box benchmark, the logic behind `make bench` (e2e/bench is its
// command): it runs weftd and flanneld one after the other in the same network namespace of
// an e2e cluster (package cluster), against a real etcd or a real kube-apiserver holding
// thousands of fake peers in flannel's formats, and measures what a user would see: time to
// subnet.env, to the first and to every peer route, memory once settled, the latency from a
// lease put to its route, and the time a bulk join takes to converge. A two-node cluster of
// its own per daemon gives the TCP throughput between pods over its VXLAN, with the device's
// transmit checksum offload on (as the daemons leave it) and off.
//
// Routes are observed through a netlink subscription inside the node's namespace, so the
// harness costs the daemon little CPU; a route to a peer's subnet in the main table counts
// whatever its form (via a gateway or through a nexthop object).
//
// The package needs root and Linux; elsewhere only its configuration and report compile.
package perf
