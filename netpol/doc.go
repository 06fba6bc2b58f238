// Package netpol turns Kubernetes NetworkPolicy (networking.k8s.io/v1) into what weftd
// enforces for the pods of its node: for each local pod, whether its ingress and egress are
// isolated and, when they are, the peers and ports each direction allows. It is a pure
// function of the cluster's pods, namespaces and policies (Compile), with no system calls,
// so that its semantics are table-tested on any OS; the data planes render its Rules (nftables
// on Linux, HNS ACLs on Windows).
//
// The semantics are Kubernetes' (the NetworkPolicy API reference and SIG Network's Netpol e2e
// suite): a pod is isolated for a direction once a policy that selects it has that direction
// in its policyTypes; an isolated direction allows the union of what every such policy's rules
// allow; a rule's peers are pods (podSelector and namespaceSelector, alone or together) or
// CIDRs (ipBlock, less its excepts); a rule with no peers allows every peer, one with no ports
// every port. Named ports are resolved on the pod that receives the traffic: the local pod for
// ingress, each peer pod for egress. What weft cannot express is refused per policy
// (Refusal), and the pods that policy selects are denied in that direction: fail closed.
package netpol
