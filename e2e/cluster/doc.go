// Package cluster builds a weft cluster inside one Linux machine for end-to-end tests and the
// demo: an underlay network namespace with a bridge and an etcd server, one network namespace
// per node running a real weftd, and pods made by the real CNI bridge and host-local plugins.
//
// Everything it creates is named after a short per-cluster prefix and registered under
// /run/weft-e2e, so that a later run can sweep what a killed run left behind. Test traffic
// stays inside these namespaces: the underlay is 192.0.2.0/24 (TEST-NET-1), the pods are in
// the network config's Network (10.244.0.0/16 in the tests).
//
// The package is Linux-only; on other systems it holds only this documentation.
package cluster
