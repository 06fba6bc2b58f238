// Package policy enforces the NetworkPolicy of a node's pods (netpol.Rules) in nftables, in
// a table of weft's own, "table inet weft_policy", programmed over netlink
// (github.com/google/nftables): no queue to user space, no iptables, no nft binary.
//
// The table holds, for the node's pod subnets S4 and S6:
//
//	chain forward (filter, hook forward, priority filter - 1, policy accept):
//	  ct state established,related accept      replies and allowed flows
//	  ip daddr S4 ip daddr != @pods4 drop      an address of S4 weft has not matched to a pod
//	  ip saddr S4 ip saddr != @pods4 drop      (fail closed: a new pod waits for its rules)
//	  ip daddr vmap @ingress4                   a local pod isolated for ingress: its chain
//	  ip saddr vmap @egress4                    a local pod isolated for egress: its chain
//	  (the same for IPv6)
//	chain in-<pod> / out-<pod>: one rule per allowed peer set and port, ending "return"
//	  (so that ingress of one pod and egress of another are both checked), then "drop".
//	set pods4, pods6: the local pods' addresses; map ingress4, egress4, ingress6, egress6:
//	  a pod address to "jump" its chain; set in-<pod>-<rule>-4 (and -6): the rule's peers,
//	  as intervals.
//
// A chain's rules depend on the policies and the pod's own named ports; which pods or CIDRs a
// rule lets through lives in its sets. So a pod that comes or goes, or a label that changes,
// rewrites set and map elements, not chains. Every change is one nftables transaction: no
// packet sees half of it. A new local pod is dropped until its address is in @pods4 with its
// map elements, in the same transaction as its chains: it is never reachable before its
// policy. The table is left in place when weftd stops, so that enforcement outlives a restart.
package policy
