package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/kubetest"
	"github.com/weftnet/weft/subnet/kube"
)

const (
	// kubeEtcdPrefix keeps the API server's objects apart from the etcd-mode keys the
	// cluster writes into the same etcd.
	kubeEtcdPrefix = "/weft-soak-kube/registry"
	// kubeTimeout bounds each request the soak makes to the API server.
	kubeTimeout = 5 * time.Second
	// The names of the Node objects of no node: the churn's and the hostile writer's.
	churnNodePrefix   = "churn-"
	hostileNodePrefix = "hostile-"
	// restoreTimeout bounds the wait for what a node's weftd restores (its annotations
	// tampered with, a route deleted): it may be stopped or frozen by other faults meanwhile,
	// or unable to finish starting while the datastore does not answer.
	restoreTimeout = time.Minute
)

// The keys of flannel's node annotations that carry a lease.
const (
	annManaged     = kube.DefaultAnnotationPrefix + "/kube-subnet-manager"
	annBackendType = kube.DefaultAnnotationPrefix + "/backend-type"
	annBackendData = kube.DefaultAnnotationPrefix + "/backend-data"
	annV6Data      = kube.DefaultAnnotationPrefix + "/backend-v6-data"
	annPublicIP    = kube.DefaultAnnotationPrefix + "/public-ip"
	annPublicIPv6  = kube.DefaultAnnotationPrefix + "/public-ipv6"
)

// kubeMode is Kubernetes mode's part of a runner: the API server in the underlay and a client
// of it with every permission.
type kubeMode struct {
	srv  *kubetest.Server
	kcli kubernetes.Interface
}

// startAPIServer runs kube-apiserver in the cluster's underlay, on its etcd.
func (r *runner) startAPIServer() error {
	dir := filepath.Join(r.c.Dir(), "kube-apiserver")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("soak: creating %s: %w", dir, err)
	}
	srv, err := kubetest.Launch(dir, r.c.APIServerOptions(kubeEtcdPrefix))
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	cs, err := kubernetes.NewForConfig(srv.Admin())
	if err != nil {
		srv.Close()
		return fmt.Errorf("soak: client of %s: %w", srv.URL(), err)
	}
	r.srv, r.kcli = srv, cs
	r.log.Logf("soak: kube-apiserver serves %s on etcd prefix %s; its log is in %s", srv.URL(), kubeEtcdPrefix, dir)
	return nil
}

// kubeconfig is every weftd's kubeconfig: the administrator's token. The soak is about
// faults; the weft role's permissions are the e2e tests' (TestKubeMode).
func (r *runner) kubeconfig(*cluster.Node) ([]byte, error) {
	rc := r.srv.Admin()
	return cluster.Kubeconfig(rc.Host, rc.CAData, rc.BearerToken)
}

// createLiveNode creates the Node object of node n<i> before its weftd starts, with its
// podCIDRs, as the kubelet and kube-controller-manager would.
func (r *runner) createLiveNode(name string, i int) error {
	cidrs := []netip.Prefix{cluster.PodCIDR(i)}
	if r.cfg.DualStack {
		cidrs = append(cidrs, cluster.PodCIDR6(i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), kubeTimeout)
	defer cancel()
	return cluster.CreateNode(ctx, r.kcli, name, nil, cidrs...)
}

// kubeLeases reads the lease of every Node that publishes one (flannel's
// kube-subnet-manager annotation and a podCIDR), by IPv4 subnet; annotations that do not
// parse make a lease that is there, not valid. A Node of no node on a live node's podCIDR
// (HostileNodes) is left out: the live node's lease is the one of that subnet.
func (r *runner) kubeLeases() (map[netip.Prefix]lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), kubeTimeout)
	defer cancel()
	list, err := r.kcli.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Node objects: %w", err)
	}
	live := map[string]bool{}
	for _, n := range r.nodes {
		live[n.Name] = true
	}
	out := map[netip.Prefix]lease{}
	// Live nodes last, so that theirs win a subnet.
	for _, wantLive := range []bool{false, true} {
		for i := range list.Items {
			n := &list.Items[i]
			if live[n.Name] != wantLive || n.Annotations[annManaged] != "true" {
				continue
			}
			var sn, sn6 netip.Prefix
			for _, c := range n.Spec.PodCIDRs {
				p, err := netip.ParsePrefix(c)
				switch {
				case err != nil:
				case p.Addr().Is4():
					sn = p.Masked()
				default:
					sn6 = p.Masked()
				}
			}
			if !sn.IsValid() {
				continue
			}
			out[sn] = r.annotatedLease(n.Annotations, sn6)
		}
	}
	return out, nil
}

// annotatedLease reads a lease from a Node's annotations.
func (r *runner) annotatedLease(ann map[string]string, sn6 netip.Prefix) lease {
	var data, data6 struct{ VtepMAC string }
	l := lease{sn6: sn6, publicIP: ann[annPublicIP], publicIP6: ann[annPublicIPv6]}
	dataErr := json.Unmarshal([]byte(ann[annBackendData]), &data)
	l.mac = strings.ToLower(data.VtepMAC)
	ip, ipErr := netip.ParseAddr(l.publicIP)
	l.valid = dataErr == nil && ipErr == nil && ip.Is4() && ann[annBackendType] == r.cfg.Backend
	if r.cfg.DualStack {
		data6Err := json.Unmarshal([]byte(ann[annV6Data]), &data6)
		l.mac6 = strings.ToLower(data6.VtepMAC)
		ip6, ip6Err := netip.ParseAddr(l.publicIP6)
		l.valid = l.valid && sn6.IsValid() && data6Err == nil && ip6Err == nil && ip6.Is6()
	}
	return l
}

// backendData is the backend-data annotation of a lease with VTEP MAC mac: vxlan's, or
// "null" as flannel writes it for host-gw.
func (r *runner) backendData(mac string) string {
	if r.cfg.Backend != "vxlan" {
		return "null"
	}
	return fmt.Sprintf(`{"VNI":1,"VtepMAC":%q}`, mac)
}

// churnAnnotations are the annotations of the valid lease NodeChurn publishes on its i-th
// subnet: a node that does not exist, at underlay addresses no node has.
func (r *runner) churnAnnotations(i int) (map[string]string, []netip.Prefix) {
	ann := map[string]string{
		annManaged:     "true",
		annBackendType: r.cfg.Backend,
		annPublicIP:    fmt.Sprintf("192.0.2.%d", 100+i),
		annBackendData: r.backendData(fmt.Sprintf("0e:55:00:00:00:%02x", i)),
	}
	cidrs := []netip.Prefix{r.churn[i]}
	if r.cfg.DualStack {
		ann[annPublicIPv6] = fmt.Sprintf("fd77:77::1:%x", i)
		ann[annV6Data] = r.backendData(fmt.Sprintf("0e:56:00:00:00:%02x", i))
		cidrs = append(cidrs, r.churn6[i])
	}
	return ann, cidrs
}

// churnNodes creates and deletes the churn's Node objects at random until the time is up.
func (r *runner) churnNodes(f Fault, until time.Time) {
	rng := newRand(f.Seed)
	r.writeUntil(until, rng, kubeTimeout, 100, 300, &r.rep.ChurnWrites, func(ctx context.Context) error {
		i := rng.IntN(len(r.churn))
		name := fmt.Sprintf("%s%d", churnNodePrefix, i)
		if rng.IntN(2) == 0 {
			ann, cidrs := r.churnAnnotations(i)
			return cluster.CreateNode(ctx, r.kcli, name, ann, cidrs...)
		}
		return r.kcli.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
}

// hostileNodes writes Node objects with unusable leases until the time is up, then deletes
// them, whatever state the API server is in.
func (r *runner) hostileNodes(f Fault, until time.Time) {
	rng := newRand(f.Seed)
	r.writeUntil(until, rng, kubeTimeout, 100, 200, &r.rep.HostileWrite, func(ctx context.Context) error {
		i := rng.IntN(len(r.hostile))
		live := rng.IntN(len(r.nodes))
		name := fmt.Sprintf("%s%d", hostileNodePrefix, i)
		ann := map[string]string{
			annManaged:     "true",
			annBackendType: r.cfg.Backend,
			annPublicIP:    fmt.Sprintf("192.0.2.%d", 150+i),
			annBackendData: r.backendData(fmt.Sprintf("0e:57:00:00:00:%02x", i)),
		}
		sn := r.hostile[i]
		switch rng.IntN(7) {
		case 0:
			ann[annBackendData] = `{"VNI":1,"VtepMAC":`
		case 1:
			ann[annPublicIP] = "not an address"
		case 2: // a copy of a live node's public IP and VTEP MAC
			r.mu.Lock()
			mac := r.macs[live]
			r.mu.Unlock()
			ann[annPublicIP], ann[annBackendData] = r.nodes[live].IP.String(), r.backendData(mac)
		case 3:
			ann[annBackendData] = `{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}`
		case 4:
			ann[annBackendType] = "udp"
		case 5:
			ann[annBackendData] = `[]`
		default: // a live node's podCIDR: the older claim, the live node's, must win
			sn = r.subnets[live]
		}
		// A podCIDR cannot change: the Node goes and comes back.
		err := r.kcli.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return cluster.CreateNode(ctx, r.kcli, name, ann, sn)
	})
	deadline := time.Now().Add(2 * time.Minute)
	for i := range r.hostile {
		name := fmt.Sprintf("%s%d", hostileNodePrefix, i)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), kubeTimeout)
			err := r.kcli.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
			cancel()
			if err == nil || apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				r.problem("%v: deleting Node %s: %v", f, name, err)
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
}

// tamper overwrites a live node's own annotations with another live node's public IP or
// VTEP MAC, or with backend-data that does not parse, until the time is up. The node's weftd
// must write them back; until the soak sees it has, the node's lease is not held against it
// (see stillTampered). The fault lasts until the peers have programmed both nodes again.
func (r *runner) tamper(rec *record, until time.Time) {
	f := rec.f
	pick := int(f.Seed % 2)
	victim, other := f.Nodes[pick], f.Nodes[1-pick]
	rec.note = fmt.Sprintf("n%d's annotations, n%d impersonated", victim+1, other+1)
	r.mu.Lock()
	r.tampered[victim] = true
	r.mu.Unlock()
	rng := newRand(f.Seed)
	name := r.nodes[victim].Name
	r.writeUntil(until, rng, kubeTimeout, 300, 700, &r.rep.TamperWrites, func(ctx context.Context) error {
		var key, value string
		switch rng.IntN(3) {
		case 0:
			key, value = annBackendData, `{"VNI":1,"VtepMAC":`
		case 1:
			key, value = annPublicIP, r.nodes[other].IP.String()
		default:
			r.mu.Lock()
			mac := r.macs[other]
			if r.cfg.Backend == "vxlan" {
				// Where the victim's claim comes first (the older Node), the other node's
				// weftd gives its device a new MAC rather than stay skipped by every peer.
				r.newMAC[other] = true
			}
			r.mu.Unlock()
			key, value = annBackendData, r.backendData(mac)
			if r.cfg.Backend != "vxlan" {
				key, value = annPublicIP, r.nodes[other].IP.String()
			}
		}
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, key, value)
		_, err := r.kcli.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		return err
	})
	// The fault lasts until the victim's weftd has written its annotations back: until then
	// the impostor's claim may hold the other node's traffic (a weftd stopped or frozen by
	// another fault writes them back only once it runs again).
	// And until every peer has programmed both nodes' leases again: a peer whose watch did
	// not hear of the write-back (stopped, or the API server frozen meanwhile) keeps the
	// impostor's claim.
	ended := time.Now()
	written := false
	for time.Since(ended) < restoreTimeout {
		if !written {
			if leases, err := r.leases(); err == nil {
				written = r.writtenBack(victim, leases[r.subnets[victim]])
				if written {
					rec.note += fmt.Sprintf("; written back %v after", time.Since(ended).Round(time.Millisecond))
				}
			}
		}
		if written && r.programmedByPeers(victim) && r.programmedByPeers(other) {
			rec.note += fmt.Sprintf(", programmed by the peers %v after", time.Since(ended).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.note += fmt.Sprintf("; not written back and programmed by the peers %v after", restoreTimeout)
}

// programmedByPeers reports whether every other node has programmed node i's lease: the
// route to its subnet and, with vxlan, the neighbour and FDB entry of its VTEP MAC. A peer
// whose weftd is stopped counts too: its kernel keeps what its last weftd left, the
// impostor's effect among it, until the next one hears of the write-back.
func (r *runner) programmedByPeers(i int) bool {
	r.mu.Lock()
	mac := r.macs[i]
	r.mu.Unlock()
	sn, ip := r.subnets[i], r.nodes[i].IP.String()
	for j, n := range r.nodes {
		if j == i {
			continue
		}
		routes, err := routesOf(n, false)
		if err != nil || !slices.ContainsFunc(routes, func(rt route) bool {
			return rt.dst == sn && (r.cfg.Backend == "vxlan" && rt.gateway == sn.Addr().String() || rt.gateway == ip)
		}) {
			return false
		}
		if r.cfg.Backend != "vxlan" {
			continue
		}
		neigh, err := jsonOf(n, "ip", "-j", "neigh", "show", "dev", vxlanDevice)
		if err != nil || !slices.ContainsFunc(neigh, func(e map[string]any) bool {
			return str(e["dst"]) == sn.Addr().String() && strings.EqualFold(str(e["lladdr"]), mac)
		}) {
			return false
		}
		fdb, err := jsonOf(n, "bridge", "-j", "fdb", "show", "dev", vxlanDevice)
		if err != nil || !slices.ContainsFunc(fdb, func(e map[string]any) bool {
			return strings.EqualFold(str(e["mac"]), mac) && str(e["dst"]) == ip
		}) {
			return false
		}
	}
	return true
}

// stillTampered reports whether node i's annotations were tampered with and are not yet
// seen written back: while an AnnotationTamper is in force on it, and until its lease names
// its public IP and VTEP MAC again.
func (r *runner) stillTampered(i int, l lease) bool {
	r.mu.Lock()
	tampered, inForce := r.tampered[i], false
	for _, rec := range r.running {
		inForce = inForce || rec.f.Kind == AnnotationTamper && rec.f.Touches(i)
	}
	r.mu.Unlock()
	if !tampered {
		return false
	}
	if inForce || !r.writtenBack(i, l) {
		return true
	}
	r.mu.Lock()
	r.tampered[i] = false
	r.mu.Unlock()
	r.log.Logf("soak: n%d: its annotations are written back", i+1)
	return false
}

// writtenBack reports whether node i's lease names its public IP and its VTEP MAC again: the
// MAC the soak knows, or, when the device may have a new one (it was deleted while weftd was
// down), the device's own. Before, a node whose MAC changed so while it was tampered with
// counted as tampered for ever, and its lease's new MAC was never taken.
func (r *runner) writtenBack(i int, l lease) bool {
	n := r.nodes[i]
	r.mu.Lock()
	known, fresh := r.macs[i], r.newMAC[i]
	r.mu.Unlock()
	if l.publicIP != n.IP.String() {
		return false
	}
	if r.cfg.Backend != "vxlan" || l.mac == known {
		return true
	}
	if !fresh {
		return false
	}
	link, err := jsonOf(n, "ip", "-j", "link", "show", vxlanDevice)
	return err == nil && len(link) == 1 && strings.EqualFold(str(link[0]["address"]), l.mac)
}
