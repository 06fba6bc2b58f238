// Package cluster builds a weft cluster inside one Linux machine for end-to-end tests and the
// demo: an underlay network namespace with a bridge and an etcd server (or a cluster of etcd
// members that a test can stop and start: Options.EtcdMembers), one network namespace per
// node running a real weftd, and pods made by the real CNI bridge and host-local plugins.
//
// Everything it creates is named after a short per-cluster prefix and registered under
// /run/weft-e2e, so that a later run can sweep what a killed run left behind. Test traffic
// stays inside these namespaces: the underlay is dual-stack, 192.0.2.0/24 (TEST-NET-1) and the
// ULA prefix fd77:77::/64, with the gateway (the underlay bridge, where etcd listens) at
// 192.0.2.1 and fd77:77::1 and the i-th node at 192.0.2.(10+i) and fd77:77::(10+i), the
// decimal digits read as hex (fd77:77::11 for 192.0.2.11); the pods are in the node subnets
// that subnet.env names, IPv4, IPv6 or both (10.244.0.0/16 in the tests).
//
// Every namespace has IPv6 on and duplicate address detection off, so that each IPv6 address
// is usable as soon as it is made: an underlay address, cni0's gateway address, a pod's.
//
// The package is Linux-only; on other systems it holds only this documentation.
package cluster
