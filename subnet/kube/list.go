package kube

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftnet/weft/subnet"
)

// NodeLease is the lease a Node publishes, as List reads it.
type NodeLease struct {
	Node  string
	Lease subnet.Lease // its subnets even when Err says its attributes cannot be read
	Err   error        // why the lease cannot be used: every weftd skips it
}

// List reads the network config of c (its NetConfPath) and, with one request, the lease of
// every Node that publishes one (the kube-subnet-manager annotation and a podCIDR), as
// weftd's watch reads them, by Node name. c.NodeName is not needed. It is for an operator's
// tool: weftd itself watches.
func List(ctx context.Context, c Config) (*subnet.Config, []NodeLease, error) {
	m, err := open(c)
	if err != nil {
		return nil, nil, err
	}
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return nil, nil, err
	}
	l, err := m.nodes.List(ctx, metav1.ListOptions{})
	if err != nil {
		return cfg, nil, fmt.Errorf("kube: list nodes: %w", err)
	}
	var out []NodeLease
	for i := range l.Items {
		n := &l.Items[i]
		lease, peer, err := m.peerLease(cfg, n)
		if !peer {
			continue
		}
		if err != nil {
			lease = subnet.Lease{Created: nodeAge(n)}
			lease.Subnet, lease.IPv6Subnet, _ = podCIDRs(nodeCIDRs(n))
		}
		out = append(out, NodeLease{Node: n.Name, Lease: lease, Err: err})
	}
	slices.SortFunc(out, func(a, b NodeLease) int { return strings.Compare(a.Node, b.Node) })
	return cfg, out, nil
}
