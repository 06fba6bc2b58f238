package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/subnet"
)

// ReadyReason is the reason of the NetworkUnavailable=False condition weft sets. flannel
// sets "FlannelIsUp"; a reason of its own lets an operator see, during a node-by-node
// migration, which nodes run weft (kubectl get nodes -o jsonpath=...reason). Nothing in
// Kubernetes reads the reason.
const ReadyReason = "WeftIsUp"

// Waiting for the node: poll quickly at first (kube-controller-manager assigns a podCIDR
// within a second of registration), and say so in the log now and then, not on every poll.
const (
	minPoll     = 250 * time.Millisecond
	maxPoll     = 5 * time.Second
	waitLogEach = 30 * time.Second
)

// GetConfig reads and validates the network config file (--net-config-path), as strictly as
// etcd mode does: a bad key is a *subnet.ConfigError naming it.
func (m *Manager) GetConfig(context.Context) (*subnet.Config, error) {
	data, err := os.ReadFile(m.netConf)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kube: %s: %w", m.netConf, subnet.ErrNoConfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kube: read network config: %w", err)
	}
	cfg, err := subnet.ParseConfig(data)
	if err != nil {
		return nil, fmt.Errorf("kube: %s: %w", m.netConf, err)
	}
	return cfg, nil
}

// Acquire implements subnet.Manager. The subnet is the node's podCIDR, waited for while the
// node or its podCIDR is not there yet; the attributes are published with one patch of the
// node's status, and only when they differ from what the node already carries.
func (m *Manager) Acquire(ctx context.Context, req subnet.AcquireRequest) (subnet.Lease, error) {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return subnet.Lease{}, err
	}
	if cfg.EnableIPv4 && !req.Attrs.PublicIP.Is4() {
		return subnet.Lease{}, fmt.Errorf("kube: acquire: IPv4 is enabled but the public IP %q is not IPv4", req.Attrs.PublicIP)
	}
	if cfg.EnableIPv6 && !req.Attrs.PublicIPv6.Is6() {
		return subnet.Lease{}, fmt.Errorf("kube: acquire: IPv6 is enabled but the public IPv6 %q is not IPv6", req.Attrs.PublicIPv6)
	}
	n, err := m.waitForPodCIDR(ctx)
	if err != nil {
		return subnet.Lease{}, err
	}
	l := subnet.Lease{Attrs: req.Attrs, Created: nodeAge(n)}
	if l.Subnet, l.IPv6Subnet, err = m.ownSubnets(cfg, n); err != nil {
		return subnet.Lease{}, fmt.Errorf("kube: acquire: %w", err)
	}
	if req.Prepare != nil {
		key := l.Key()
		held, _ := m.ann.attrs(cfg, mapLookup(n.Annotations)) // none readable: a new node's
		if l.Attrs, err = req.Prepare(ctx, l.Subnet, l.IPv6Subnet, held); err != nil {
			return subnet.Lease{}, fmt.Errorf("kube: prepare lease %s: %w", key, err)
		}
		if l.Attrs.PublicIP != req.Attrs.PublicIP || l.Attrs.PublicIPv6 != req.Attrs.PublicIPv6 {
			return subnet.Lease{}, fmt.Errorf("kube: prepare lease %s changed the public IP", key)
		}
	}
	m.mu.Lock()
	m.public = [2]netip.Addr{req.Attrs.PublicIP, req.Attrs.PublicIPv6}
	m.mu.Unlock()
	if l, _, err = m.publish(ctx, cfg, n, l); err != nil {
		return subnet.Lease{}, err
	}
	m.log.Info("acquired lease", "node", m.node, "lease", l.String())
	return l, nil
}

// Renew implements subnet.Manager. A podCIDR does not expire, so renewing is checking: if
// the node's annotations were removed or changed (the lease "lost"), they are written again.
// The lease follows the node's podCIDR, which changes only when the Node object was deleted
// and registered again.
func (m *Manager) Renew(ctx context.Context, own subnet.Lease) (subnet.Lease, error) {
	cfg, err := m.GetConfig(ctx)
	if err != nil {
		return subnet.Lease{}, err
	}
	n, err := m.getNode(ctx)
	if err != nil {
		return subnet.Lease{}, fmt.Errorf("kube: renew: get node %q: %w", m.node, err)
	}
	l := subnet.Lease{Attrs: own.Attrs, Created: nodeAge(n)}
	if l.Subnet, l.IPv6Subnet, err = m.ownSubnets(cfg, n); err != nil {
		return subnet.Lease{}, fmt.Errorf("kube: renew: %w", err)
	}
	if !l.SameSubnets(own) {
		m.log.Warn("node's podCIDR changed: the Node object was registered again", "node", m.node, "old", own.Key(), "new", l.Key())
	}
	m.mu.Lock()
	if m.public[0].IsValid() || m.public[1].IsValid() {
		l.Attrs.PublicIP, l.Attrs.PublicIPv6 = m.public[0], m.public[1]
	}
	m.mu.Unlock()
	l, wrote, err := m.publish(ctx, cfg, n, l)
	if wrote {
		m.log.Warn("node annotations differed from the lease (removed, edited, or new attributes), published the lease again", "node", m.node, "lease", l.String())
	}
	return l, err
}

// Release implements subnet.Manager: a node cannot give back its podCIDR.
func (m *Manager) Release(context.Context, subnet.Lease) error {
	return subnet.ErrNotSupported
}

// getNode reads the node's Node object, noting its UID for the Events about it.
func (m *Manager) getNode(ctx context.Context) (*corev1.Node, error) {
	n, err := m.nodes.Get(ctx, m.node, metav1.GetOptions{})
	if err == nil {
		m.mu.Lock()
		m.uid = n.UID
		m.mu.Unlock()
	}
	return n, err
}

// waitForPodCIDR returns the node once it exists and has a podCIDR. Any other error from
// the API server ends the wait: the caller's retry logs it and backs off.
func (m *Manager) waitForPodCIDR(ctx context.Context) (*corev1.Node, error) {
	poll := minPoll
	var logged time.Time
	var said string
	for {
		n, err := m.getNode(ctx)
		var missing string
		switch {
		case apierrors.IsNotFound(err):
			missing = "the Node object (is NODE_NAME right? has the kubelet registered?)"
		case err != nil:
			return nil, fmt.Errorf("kube: get node %q: %w", m.node, err)
		case n.Spec.PodCIDR == "" && len(n.Spec.PodCIDRs) == 0:
			missing = "a podCIDR (kube-controller-manager assigns it with --allocate-node-cidrs)"
		default:
			return n, nil
		}
		if missing != said || time.Since(logged) >= waitLogEach {
			m.log.Info("waiting for "+missing, "node", m.node)
			logged, said = time.Now(), missing
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kube: node %q: waiting for %s: %w", m.node, missing, ctx.Err())
		case <-time.After(poll):
		}
		poll = min(2*poll, maxPoll)
	}
}

// ownSubnets returns the node's podCIDRs of the enabled families. They must be subnets that
// the rest of weft accepts from peers: inside Network and exactly SubnetLen long (flannel
// checks only the first). A mismatch is a *subnet.ConfigError, since net-conf.json and
// kube-controller-manager's --cluster-cidr and --node-cidr-mask-size disagree.
func (m *Manager) ownSubnets(cfg *subnet.Config, n *corev1.Node) (sn, sn6 netip.Prefix, err error) {
	v4, v6, err := podCIDRs(nodeCIDRs(n))
	if err != nil {
		return netip.Prefix{}, netip.Prefix{}, fmt.Errorf("node %q: %w", m.node, err)
	}
	for _, f := range []struct {
		on             bool
		family         string
		p, network     netip.Prefix
		bits           int
		netKey, lenKey string
		out            *netip.Prefix
	}{
		{cfg.EnableIPv4, "IPv4", v4, cfg.Network, cfg.SubnetLen, "Network", "SubnetLen", &sn},
		{cfg.EnableIPv6, "IPv6", v6, cfg.IPv6Network, cfg.IPv6SubnetLen, "IPv6Network", "IPv6SubnetLen", &sn6},
	} {
		switch {
		case !f.on:
			continue
		case !f.p.IsValid():
			err = &subnet.ConfigError{Key: "Enable" + f.family, Value: "true",
				Reason: fmt.Sprintf("node %q has no %s podCIDR (podCIDRs %q)", m.node, f.family, n.Spec.PodCIDRs)}
		case !f.network.Contains(f.p.Addr()) || f.p.Bits() < f.network.Bits():
			err = &subnet.ConfigError{Key: f.netKey, Value: f.network.String(),
				Reason: fmt.Sprintf("does not contain node %q's podCIDR %s (kube-controller-manager's --cluster-cidr must lie inside it)", m.node, f.p)}
		case f.p.Bits() != f.bits:
			err = &subnet.ConfigError{Key: f.lenKey, Value: strconv.Itoa(f.bits),
				Reason: fmt.Sprintf("node %q's podCIDR %s is a /%d: %s must equal kube-controller-manager's --node-cidr-mask-size", m.node, f.p, f.p.Bits(), f.lenKey)}
		}
		if err != nil {
			return netip.Prefix{}, netip.Prefix{}, err
		}
		*f.out = f.p
	}
	return sn, sn6, nil
}

// publish makes the node's annotations say l, with the administrator's public IP overwrites
// applied, and returns l as published. Everything that differs goes in one patch of
// nodes/status, the subresource the RBAC role grants.
func (m *Manager) publish(ctx context.Context, cfg *subnet.Config, n *corev1.Node, l subnet.Lease) (subnet.Lease, bool, error) {
	var err error
	if l.Attrs, err = m.overwrite(n, l.Attrs); err != nil {
		return subnet.Lease{}, false, err
	}
	diff := changes(n.Annotations, m.ann.values(cfg, l.Attrs))
	if len(diff) == 0 {
		return l, false, nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": diff}})
	if err != nil {
		return subnet.Lease{}, false, fmt.Errorf("kube: encode annotations of node %q: %w", m.node, err)
	}
	_, err = m.nodes.Patch(ctx, m.node, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if err != nil {
		return subnet.Lease{}, false, fmt.Errorf("kube: annotate node %q with lease %s: %w", m.node, l.Key(), err)
	}
	return l, true, nil
}

// overwrite applies public-ip-overwrite and public-ipv6-overwrite: an administrator's way
// to publish an address other than the node's own (a NAT in front of it, say).
func (m *Manager) overwrite(n *corev1.Node, attrs subnet.LeaseAttrs) (subnet.LeaseAttrs, error) {
	for _, o := range []struct {
		key string
		v6  bool
		to  *netip.Addr
	}{{m.ann.publicIPOverwrite, false, &attrs.PublicIP}, {m.ann.publicIPv6Overwrite, true, &attrs.PublicIPv6}} {
		ip, err := addr(mapLookup(n.Annotations), o.key, o.v6, false)
		if err != nil {
			return subnet.LeaseAttrs{}, fmt.Errorf("kube: node %q: %w", m.node, err)
		}
		if ip.IsValid() && ip != *o.to {
			m.log.Info("publishing the public IP of the node's overwrite annotation", "node", m.node, "annotation", o.key, "ip", ip, "instead_of", *o.to)
			*o.to = ip
		}
	}
	return attrs, nil
}

// NodePublicIPs returns the addresses an administrator set in the node's node-public-ip and
// node-public-ipv6 annotations, zero when absent. flanneld takes them as its --public-ip and
// --public-ipv6, over the flags.
func (m *Manager) NodePublicIPs(ctx context.Context) (v4, v6 netip.Addr, err error) {
	n, err := m.getNode(ctx)
	if err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("kube: get node %q: %w", m.node, err)
	}
	if v4, err = addr(mapLookup(n.Annotations), m.ann.nodePublicIP, false, false); err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("kube: node %q: %w", m.node, err)
	}
	if v6, err = addr(mapLookup(n.Annotations), m.ann.nodePublicIPv6, true, false); err != nil {
		return netip.Addr{}, netip.Addr{}, fmt.Errorf("kube: node %q: %w", m.node, err)
	}
	return v4, v6, nil
}

// SetReady implements subnet.Readier: it sets the node condition NetworkUnavailable=False with
// reason ReadyReason, through a strategic merge patch of nodes/status, which merges
// conditions by type and so leaves the kubelet's own conditions alone. Calling it again
// changes nothing.
func (m *Manager) SetReady(ctx context.Context) error {
	n, err := m.getNode(ctx)
	if err != nil {
		return fmt.Errorf("kube: set node %q ready: %w", m.node, err)
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{
		Type:               corev1.NodeNetworkUnavailable,
		Status:             corev1.ConditionFalse,
		Reason:             ReadyReason,
		Message:            "weft is running on this node",
		LastHeartbeatTime:  now,
		LastTransitionTime: now,
	}
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeNetworkUnavailable || c.Status != corev1.ConditionFalse {
			continue
		}
		if c.Reason == ReadyReason {
			return nil
		}
		cond.LastTransitionTime = c.LastTransitionTime // no transition: it was False already
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return fmt.Errorf("kube: encode condition of node %q: %w", m.node, err)
	}
	_, err = m.nodes.Patch(ctx, m.node, types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if err != nil {
		return fmt.Errorf("kube: set node %q condition NetworkUnavailable=False: %w", m.node, err)
	}
	m.log.Info("node condition set", "node", m.node, "NetworkUnavailable", "False", "reason", ReadyReason)
	return nil
}
