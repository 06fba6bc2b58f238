// Command weft-bench is `make bench`'s black-box benchmark: weftd and flanneld, one after the
// other in the same network namespace of an e2e cluster, against a real etcd holding 1,000 to
// 20,000 fake peer leases and a real kube-apiserver holding 1,000 and 5,000 Node objects. It
// prints one table, each figure for both daemons with weftd's ratio to flanneld: time to
// subnet.env, to the first and to all peer routes, RSS once settled, lease put to route
// latency (p50 and p99), a bulk join, Kubernetes mode, and the TCP throughput between pods on
// two nodes over the VXLAN overlay with the device's transmit checksum offload on and off. See
// package perf for what each figure measures.
//
// It builds nothing: give it --weftd; flanneld is the one tools/flannel builds (or
// $WEFT_FLANNELD), kube-apiserver the one tools/kube builds (or $WEFT_KUBE_APISERVER), the
// CNI plugins of the throughput figures' pods those of $WEFT_CNI_BIN or .cache/cni/bin
// (tools/install-cni.sh installs them there). It needs root, and Linux.
package main
