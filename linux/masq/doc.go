// Package masq programs the masquerade of weftd's --ip-masq with nftables,
// with flannel's semantics: traffic from the pod network to outside it leaves
// with the node's address, traffic within the cluster network keeps its
// addresses, and traffic kube-proxy has marked (0x4000/0x4000) is left to
// kube-proxy, which masquerades it itself.
//
// The rules live in tables of weft's own ("table ip weft", "table ip6 weft"),
// in a base chain "postrouting" (type nat, hook postrouting, priority srcnat),
// so that they never mix with rules of kube-proxy, of the distribution's
// firewall, or of a flanneld that ran before on the same node. They are
// programmed over netlink with github.com/google/nftables: weftd needs neither
// the nft nor the iptables binary.
//
// For a cluster network N and the node's own subnet S the chain holds, per
// enabled family:
//
//	meta mark & 0x4000 == 0x4000 return            kube-proxy's, it masquerades it itself
//	ip saddr N ip daddr N return                   pod to pod is never masqueraded
//	ip saddr N ip daddr != 224.0.0.0/4 masquerade fully-random
//	ip saddr != N ip daddr S return                the node's pods see the real client
//	ip saddr != N ip daddr N masquerade fully-random
//
// The last two are flannel's (iptables mode): traffic from outside the
// cluster network to this node's pods keeps its source, so that pods, network
// policies and externalTrafficPolicy=Local see the real client; traffic from
// outside to pods of other nodes is masqueraded so that their replies come
// back through this node instead of taking another path the sender's
// conntrack never sees.
//
// The same tables hold, when weftd's --iptables-forward-rules is on (its default,
// as flanneld's), a base chain "forward" (type filter, hook forward, priority
// filter, policy accept) with flanneld's two rules, "ip saddr N accept" and
// "ip daddr N accept" (EnsureForward), so that a host whose other rules drop
// forwarded traffic by default still forwards the pod network's.
//
// The reconciliation is declarative and does not interrupt traffic: when the
// kernel already holds the wanted rules nothing is written; otherwise the
// chain's content is replaced in a single nftables transaction, and the table
// and chain that carry traffic are never deleted to do it. Everything that
// talks to the kernel is Linux-only; on other systems the package is empty
// but for the OS-neutral description of the rules.
package masq
