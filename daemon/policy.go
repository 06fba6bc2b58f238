package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/netpol"
	npkube "github.com/weftnet/weft/netpol/kube"
	"github.com/weftnet/weft/status"
)

// PolicyPlane enforces the NetworkPolicy of the node's pods in the OS (Linux: nftables,
// linux/policy; Windows: HNS ACLs on the pods' endpoints, windows). Options is what it can
// express, which Compile refuses the rest by. Enforce is declarative: it makes the OS hold
// what rules say for a node whose pod subnets are subnets, writes only what differs, and
// returns a summary of what it wrote, empty when nothing. Remove deletes everything it
// programmed.
type PolicyPlane interface {
	Options() netpol.Options
	// Enforce with full checks everything the OS holds (and repairs drift); without, it may
	// write only what differs from what it last wrote.
	Enforce(rules netpol.Rules, subnets []netip.Prefix, full bool) (written string, err error)
	Remove() error
}

// NoticePolicyRefused is the reason of the warning about a NetworkPolicy weft cannot
// enforce as written (netpol.Refusal), told once per policy and reason.
const NoticePolicyRefused = "NetworkPolicyRefused"

// policyResync is how often the policy table is checked against the cluster without a
// change: the drift repair's period.
const policyResync = 10 * time.Second

// errPolicyNotListed is /readyz's reason until the policy watch's first lists are in.
var errPolicyNotListed = errors.New("pods, namespaces and NetworkPolicies not listed yet: nothing enforced (weftd needs to list and watch them: the ClusterRole weft-network-policy)")

// policyLog is the logger of --network-policy's parts.
func policyLog(log *slog.Logger) *slog.Logger { return log.With("component", "network-policy") }

// policyRetry is how soon a failed write of the policy table is tried again.
const policyRetry = time.Second

// enforcePolicy runs --network-policy until ctx ends: w, the watch of the cluster's pods,
// namespaces and policies, and after each change (or policyResync) the rules of the node's
// pods compiled and handed to plane. Nothing is written before the watch's first lists are
// in, so the first write holds every pod's rules at once. subnets are the node's pod subnets,
// read at each write (the own lease may move). report is told, after each write, whether it
// succeeded (nil) or not and what the node's pods are under (for /status); until the first
// one it is not called.
func enforcePolicy(ctx context.Context, log *slog.Logger, m *metrics, ev Events, w *npkube.Watcher, node string,
	plane PolicyPlane, subnets func() []netip.Prefix, report func(error, *status.NetworkPolicy)) {
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	select {
	case <-ctx.Done():
		<-done
		return
	case <-w.Synced():
	}
	log.Info("enforcing NetworkPolicy: pods, namespaces and policies listed")
	tick := time.NewTicker(policyResync)
	defer tick.Stop()
	// refused are the refusals logged already, each with whether its Event is posted: an
	// Event about the policy, from a node where it selects pods (every node refuses a policy
	// it cannot enforce; only those whose pods it denies say so to the policy's readers).
	refused := map[netpol.Refusal]bool{}
	// full: the first write, each resync (drift repair) and a retry check all the OS holds;
	// a change writes what differs from the last write.
	full, resync := true, false
	var written time.Time
	for {
		pods, nss, pols := w.Snapshot()
		rules := netpol.Compile(netpol.Cluster{Pods: pods, Namespaces: nss, Policies: pols}, node, plane.Options())
		now := map[netpol.Refusal]bool{}
		var local map[string]bool // the policies that select pods of the node
		for _, r := range rules.Refused {
			told, logged := refused[r]
			if !logged {
				log.Warn("NetworkPolicy refused: the pods it selects are denied in its directions", "policy", r.Policy, "reason", r.Reason)
			}
			if local == nil {
				local = selectingPolicies(rules)
			}
			if !told && local[r.Policy] {
				ev.NoticeAbout(policyObject(pols, r.Policy), true, NoticePolicyRefused, fmt.Sprintf("NetworkPolicy %s cannot be enforced as written, so the pods it selects on node %s are denied in its directions: %s", r.Policy, node, r.Reason))
				told = true
			}
			now[r] = told
		}
		refused = now
		m.policyRefused.Set(float64(len(now)))
		countIsolation(m, rules)
		wrote, err := plane.Enforce(rules, subnets(), full)
		if err == nil && (wrote != "" || written.IsZero()) {
			written = time.Now()
		}
		report(err, policyStatus(rules, written, err))
		if err == nil && resync && wrote != "" {
			m.policyDrift.Inc()
			log.Warn("NetworkPolicy drift repaired: the data plane no longer held what weftd wrote", "written", wrote)
		}
		full, resync = err != nil, false
		switch {
		case err != nil:
			m.policyWrites.WithLabelValues("error").Inc()
			log.Error("programming NetworkPolicy failed; retrying", "err", err)
			retry := time.NewTimer(policyRetry)
			select {
			case <-ctx.Done():
				retry.Stop()
				<-done
				return
			case <-retry.C:
			}
			continue
		case wrote != "":
			m.policyWrites.WithLabelValues("success").Inc()
			log.Info("NetworkPolicy programmed", "pods", len(rules.Pods), "policies", len(pols), "written", wrote)
		}
		select {
		case <-ctx.Done():
			<-done
			return
		case <-w.Changed():
		case <-tick.C:
			full, resync = true, true
		}
	}
}

// selectingPolicies are the policies that select a pod of the node, by "namespace/name".
func selectingPolicies(rules netpol.Rules) map[string]bool {
	out := map[string]bool{}
	for _, pr := range rules.Pods {
		for _, p := range pr.Policies {
			out[p] = true
		}
	}
	return out
}

// policyObject is what an Event about the policy called key ("namespace/name") regards:
// the policy of pols, with its UID (kubectl describe looks for it), or, if pols lacks it,
// the policy by name.
func policyObject(pols []*networkingv1.NetworkPolicy, key string) events.Object {
	ns, name, _ := strings.Cut(key, "/")
	obj := events.Object{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy", Namespace: ns, Name: name}
	for _, p := range pols {
		if p.Namespace == ns && p.Name == name {
			obj.UID = string(p.UID)
			break
		}
	}
	return obj
}

// policyStatus is /status's view of rules, last written at written (zero: never) with err.
func policyStatus(rules netpol.Rules, written time.Time, err error) *status.NetworkPolicy {
	st := &status.NetworkPolicy{Pods: []status.PolicyPod{}}
	for _, key := range slices.Sorted(maps.Keys(rules.Pods)) {
		pr := rules.Pods[key]
		if pr.Ingress == nil && pr.Egress == nil {
			st.Open++
			continue
		}
		pod := status.PolicyPod{Pod: key, Ingress: pr.Ingress != nil, Egress: pr.Egress != nil, Policies: pr.Policies}
		for _, ip := range pr.IPs {
			pod.IPs = append(pod.IPs, ip.String())
		}
		st.Pods = append(st.Pods, pod)
	}
	for _, r := range rules.Refused {
		st.Refused = append(st.Refused, status.PolicyRefused{Policy: r.Policy, Reason: r.Reason})
	}
	if !written.IsZero() {
		st.Written = &written
	}
	if err != nil {
		st.Error = err.Error()
	}
	return st
}

// countIsolation sets weft_network_policy_pods and _rules from rules.
func countIsolation(m *metrics, rules netpol.Rules) {
	counts := map[string]int{"none": 0, "ingress": 0, "egress": 0, "both": 0}
	allow := 0
	for _, p := range rules.Pods {
		for _, d := range []*netpol.Direction{p.Ingress, p.Egress} {
			if d != nil {
				allow += len(d.Allow)
			}
		}
		switch {
		case p.Ingress != nil && p.Egress != nil:
			counts["both"]++
		case p.Ingress != nil:
			counts["ingress"]++
		case p.Egress != nil:
			counts["egress"]++
		default:
			counts["none"]++
		}
	}
	for k, n := range counts {
		m.policyPods.WithLabelValues(k).Set(float64(n))
	}
	m.policyRules.Set(float64(allow))
}
