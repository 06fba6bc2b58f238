package kube

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/weftnet/weft/netpol"
)

// podRecord is what the pod informer keeps of a Pod, in place of the Pod: the informer's
// transform (trimPod) makes it as the Pod arrives, so no whole Pod stays in the cache. A
// Pod, even cleared of all but what policy reads, is a struct several times the size of a
// record, and one more container struct for each container. A record is a runtime.Object
// with an ObjectMeta, as the informer's store and handlers expect.
type podRecord struct {
	// Name, Namespace and Labels, and ResourceVersion, which client-go's stores read. Nothing
	// else is set.
	metav1.ObjectMeta

	node  string
	ips   []netip.Addr // empty for a pod policy does not see (podRecord.seen)
	ports []netpol.NamedPort
	// badIP is the first address of the Pod's status that does not parse, if any: the
	// watcher logs it when it first sees it on the pod, and not again on every update.
	badIP string
}

// seen reports whether policy sees the pod: one that has an address, is not on the host
// network and has not finished. A record of a pod it does not see keeps only its key.
func (r *podRecord) seen() bool { return len(r.ips) > 0 }

// sameView reports whether policy sees the same of r as of o, two records of one pod.
func (r *podRecord) sameView(o *podRecord) bool {
	if !r.seen() || !o.seen() {
		return r.seen() == o.seen()
	}
	return r.node == o.node && maps.Equal(r.Labels, o.Labels) && slices.Equal(r.ips, o.ips) &&
		slices.Equal(r.ports, o.ports)
}

// pod is the record as policy sees it. It shares the record's labels, addresses and ports.
func (r *podRecord) pod() netpol.Pod {
	return netpol.Pod{Namespace: r.Namespace, Name: r.Name, Labels: r.Labels, IPs: r.ips, Node: r.node, Ports: r.ports}
}

// GetObjectKind is empty: a record is never encoded.
func (*podRecord) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

// DeepCopyObject copies r.
func (r *podRecord) DeepCopyObject() runtime.Object {
	c := &podRecord{node: r.node, ips: slices.Clone(r.ips), ports: slices.Clone(r.ports), badIP: r.badIP}
	r.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// trimPod is the pod informer's transform: a Pod becomes its record. It may be given a
// record: a streamed list's objects go through the transform as they come and again when the
// list replaces the cache's content.
func trimPod(obj any) (any, error) {
	switch o := obj.(type) {
	case *podRecord:
		return o, nil
	case *corev1.Pod:
		return newPodRecord(o), nil
	}
	return nil, fmt.Errorf("netpol pod watch: a %T, not a Pod", obj)
}

// newPodRecord makes the record of p.
func newPodRecord(p *corev1.Pod) *podRecord {
	r := &podRecord{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, ResourceVersion: p.ResourceVersion}}
	if p.Spec.HostNetwork || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
		return r
	}
	r.ips, r.badIP = podIPs(p.Status)
	if len(r.ips) == 0 {
		return r
	}
	r.Labels, r.node, r.ports = p.Labels, p.Spec.NodeName, namedPorts(&p.Spec)
	return r
}

// podIPs parses the pod's addresses: status.podIPs, or status.podIP from an API server
// that does not set podIPs. bad is the first that does not parse, which is left out.
func podIPs(st corev1.PodStatus) (ips []netip.Addr, bad string) {
	strs := make([]string, 0, max(len(st.PodIPs), 1))
	for _, ip := range st.PodIPs {
		strs = append(strs, ip.IP)
	}
	if len(strs) == 0 && st.PodIP != "" {
		strs = append(strs, st.PodIP)
	}
	for _, s := range strs {
		ip, err := netip.ParseAddr(s)
		if err != nil {
			if bad == "" {
				bad = s
			}
			continue
		}
		ips = append(ips, ip)
	}
	return ips, bad
}

// namedPorts are the ports with a name of the pod's containers, then of its sidecars (init
// containers that restart: they run beside the containers, and serve as they do), in the
// order of the spec, which is the order Kubernetes looks a name up in. Other init containers
// have finished before the pod serves. The API server defaults a port's protocol to TCP.
func namedPorts(spec *corev1.PodSpec) []netpol.NamedPort {
	var ports []netpol.NamedPort
	add := func(c *corev1.Container) {
		for _, p := range c.Ports {
			if p.Name == "" || p.ContainerPort < 1 || p.ContainerPort > 65535 {
				continue
			}
			proto := netpol.Protocol(p.Protocol)
			if proto == "" {
				proto = netpol.TCP
			}
			ports = append(ports, netpol.NamedPort{Name: p.Name, Protocol: proto, Port: uint16(p.ContainerPort)})
		}
	}
	for i := range spec.Containers {
		add(&spec.Containers[i])
	}
	for i := range spec.InitContainers {
		if c := &spec.InitContainers[i]; c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			add(c)
		}
	}
	return ports
}

// trimNamespace is the namespace informer's transform: a Namespace of its name and labels,
// and the resource version the informer's store reads.
func trimNamespace(obj any) (any, error) {
	ns, ok := obj.(*corev1.Namespace)
	if !ok {
		return nil, fmt.Errorf("netpol namespace watch: a %T, not a Namespace", obj)
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name: ns.Name, ResourceVersion: ns.ResourceVersion, Labels: ns.Labels,
	}}, nil
}

// trimPolicy is the policy informer's transform: the NetworkPolicy less its managed fields
// and annotations (kubectl's last-applied-configuration repeats the whole policy). Policies
// are few and the compiler reads them whole, so they stay NetworkPolicies.
func trimPolicy(obj any) (any, error) {
	p, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return nil, fmt.Errorf("netpol policy watch: a %T, not a NetworkPolicy", obj)
	}
	// The transform sees the object before anything else does (client-go 1.27 and later),
	// so it may change it in place.
	p.ManagedFields, p.Annotations = nil, nil
	return p, nil
}
