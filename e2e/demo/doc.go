// Command weft-demo runs a weft cluster in network namespaces on this machine, for `make
// demo`: an etcd, three nodes each running the given weftd, two pods per node made by the
// real CNI bridge plugin. It prints each node's lease and a table of pings from every pod to
// every other pod, then tears everything down; with --keep it leaves the cluster running,
// says how to look around, and how to remove it later (--teardown --prefix P).
//
// It builds nothing: pass --weftd and --cni-bin. It needs root, and Linux.
package main
