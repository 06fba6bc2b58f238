package kubecluster

import (
	"context"
	"path/filepath"
	"testing"
	"time"
)

// netpolFocus selects Kubernetes' own NetworkPolicy specs: SIG Network's Netpol suite (a
// matrix of pods in three namespaces probing each other on TCP, UDP and SCTP ports under each
// policy, and the NetworkPolicy API specs).
var netpolFocus = []string{`\[sig-network\] Netpol`}

// netpolSkipped are the Netpol specs that cannot run on this machine, by their full text,
// each with why (see e2eSkipped).
var netpolSkipped = map[string]string{
	"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should enforce policy based on Ports [Feature:NetworkPolicy]":                                                                                       noSCTPPods,
	"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should enforce policy to allow traffic only from a pod in a different namespace based on PodSelector and NamespaceSelector [Feature:NetworkPolicy]": noSCTPPods,
	"[sig-network] Netpol [Feature:SCTPConnectivity] [LinuxOnly] NetworkPolicy between server and client using SCTP should support a 'default-deny-ingress' policy [Feature:NetworkPolicy]":                                                                             noSCTPPods,
}

// noSCTPPods is why the Netpol specs of SCTP connectivity cannot run here.
const noSCTPPods = "needs SCTP in the nodes' kernel to carry SCTP between pods: this machine's kernel has none " +
	"(no /proc/net/sctp, and no module to load); weft's nftables rules match SCTP ports as TCP's (TestBuild)"

// TestNetworkPolicyConformance runs Kubernetes' NetworkPolicy specs (netpolFocus, less
// netpolSkipped) against a three-node cluster running weft deployed from dist/kubernetes with
// NetworkPolicy on, as README.md says to turn it on, and fails on any failed spec. make
// conformance runs it.
func TestNetworkPolicyConformance(t *testing.T) {
	opts, repo := needSuite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Minute)
	defer cancel()
	start := time.Now()
	c := newCluster(t, 3)
	deployWeftWith(ctx, t, c, (*Cluster).DeployWeftWithPolicy)
	prepareSuite(ctx, t, c, repo, start)
	runSuite(ctx, t, c, filepath.Join(repo, ".cache", "conformance-netpol"), opts.KubeBin, suiteFocus(netpolFocus), netpolSkipped, 0)
}
