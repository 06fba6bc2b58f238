// Command weft-bench is `make bench`'s black-box benchmark: weftd and flanneld, one after the
// other in the same network namespace of an e2e cluster, against a real etcd holding 1,000 to
// 20,000 fake peer leases and a real kube-apiserver holding 1,000 and 5,000 Node objects. It
// prints one table, each figure for both daemons with weftd's ratio to flanneld: time to
// subnet.env, to the first and to all peer routes, RSS once settled, lease put to route
// latency (p50 and p99), a bulk join, and Kubernetes mode. See package perf for what each
// figure measures.
//
// It builds nothing: give it --weftd; flanneld is the one tools/flannel builds (or
// $WEFT_FLANNELD), kube-apiserver the one tools/kube builds (or $WEFT_KUBE_APISERVER). It
// needs root, and Linux.
package main
