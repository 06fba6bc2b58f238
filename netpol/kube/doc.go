// Package kube keeps what NetworkPolicy enforcement needs of a Kubernetes cluster, from the
// API server: the pods' labels, addresses, nodes and named ports, the namespaces' labels, and
// the NetworkPolicies (Watcher). Its informers' caches keep only that, so that weftd's memory
// grows with the pods' labels, addresses and named ports, not with whole Pod objects. Its
// Snapshot is what package netpol compiles rules from.
//
// # Permissions
//
// The Watcher lists and watches across all namespaces, so its identity needs a ClusterRole
// (bound with a ClusterRoleBinding) with these rules, and no more:
//
//	rules:
//	- apiGroups: [""]
//	  resources: [pods, namespaces]
//	  verbs: [list, watch]
//	- apiGroups: [networking.k8s.io]
//	  resources: [networkpolicies]
//	  verbs: [list, watch]
//
// The tests run the Watcher under a ClusterRole read from this comment, and fail on any
// request the API server refuses it.
package kube
