package policy

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/weftnet/weft/netpol"
)

// The figures of NetworkPolicy's cost (make bench; root). Data path: TCP between a remote
// pod (the peer namespace) and a local one (pod1), forwarded by the node, with conntrack on
// as on any Kubernetes node, with no policy table ("off") and with weft's table ("on")
// isolating pod1 to what its policy allows beside the rules of benchOtherPods more local
// pods, as on a busy node. Control path: the time from
// one change of the cluster to the kernel holding it (Compile, Build, Ensure), at cluster
// sizes, and the heap it keeps per pod.

// benchOtherPods are the other local pods of the "on" table, each isolated both ways.
const benchOtherPods = 100

// dataPathRules isolates pod1 for ingress to the peer namespace's pods on TCP 8080 and 8081,
// beside benchOtherPods pods with rules of their own.
func dataPathRules() netpol.Rules {
	r := netpol.Rules{Pods: map[string]netpol.PodRules{
		"bench/pod1": {IPs: []netip.Addr{addr("10.244.1.2")}, Ingress: &netpol.Direction{Allow: []netpol.Rule{{
			Peers: []netpol.Range{{From: addr("10.244.2.0"), To: addr("10.244.2.255")}},
			Ports: []netpol.Port{{Protocol: netpol.TCP, From: 8080, To: 8081}},
		}}}},
	}}
	for i := range benchOtherPods {
		ip := netip.AddrFrom4([4]byte{10, 244, 1, byte(10 + i)})
		peers := []netpol.Range{{From: netip.AddrFrom4([4]byte{10, 244, 3, byte(i)}), To: netip.AddrFrom4([4]byte{10, 244, 3, byte(i)})}}
		d := &netpol.Direction{Allow: []netpol.Rule{{Peers: peers, Ports: []netpol.Port{{Protocol: netpol.TCP, From: 80, To: 80}}}}}
		r.Pods[fmt.Sprintf("bench/other-%d", i)] = netpol.PodRules{IPs: []netip.Addr{ip}, Ingress: d, Egress: d}
	}
	return r
}

// BenchmarkDataPath: new TCP connections per second (a connect, a 2-byte answer, a close)
// and one stream's throughput from a remote pod to a local one, without and with the table.
func BenchmarkDataPath(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "policy=off"
		if on {
			name = "policy=on"
		}
		b.Run(name, func(b *testing.B) {
			n := newTestNet(b)
			n.listen("pod1", "10.244.1.2", 8080)
			sunk := n.sink("pod1", "10.244.1.2", 8081)
			// Both ways the node tracks connections, as every Kubernetes node does (kube-proxy's
			// rules, weft's masquerade): a table of its own that matches conntrack state, so that
			// "off" is not also conntrack off.
			n.sh("node", "nft add table inet bench_ct && nft add chain inet bench_ct tracked '{ type filter hook forward priority 10; }' && "+
				"nft add rule inet bench_ct tracked ct state established,related counter")
			// Ports enough for the connections of a run: a closed one's port waits out TIME_WAIT.
			n.sh("peer", "sysctl -qw net.ipv4.ip_local_port_range='1024 65000'")
			if on {
				n.ensure(Build(dataPathRules(), subnets))
			}
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("10.244.2.2")}}
			b.Run("connect", func(b *testing.B) {
				n.inNS("peer", func() {
					buf := make([]byte, 2)
					b.ResetTimer()
					for range b.N {
						c, err := d.Dial("tcp", "10.244.1.2:8080")
						if err != nil {
							b.Error(err)
							return
						}
						if k, _ := c.Read(buf); string(buf[:k]) != "ok" {
							b.Error("no answer")
						}
						c.Close()
					}
					b.StopTimer()
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "conn/s")
			})
			b.Run("stream", func(b *testing.B) {
				const chunk = 1 << 20
				n.inNS("peer", func() {
					c, err := d.Dial("tcp", "10.244.1.2:8081")
					if err != nil {
						b.Error(err)
						return
					}
					buf := make([]byte, chunk)
					b.SetBytes(chunk)
					b.ResetTimer()
					for range b.N {
						if _, err := c.Write(buf); err != nil {
							b.Error(err)
							break
						}
					}
					c.Close()
					if got := <-sunk; got != int64(b.N)*chunk {
						b.Errorf("the sink read %d bytes, want %d", got, int64(b.N)*chunk)
					}
					b.StopTimer()
				})
			})
		})
	}
}

// sink serves TCP on addr:port in namespace ns, reading each connection to its end and
// sending the bytes read on the channel it returns.
func (n *testNet) sink(ns, addr string, port int) <-chan int64 {
	l := n.listener(ns, addr, port)
	out := make(chan int64, 1)
	go func() {
		buf := make([]byte, 1<<20)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			var total int64
			for {
				k, err := c.Read(buf)
				total += int64(k)
				if err != nil {
					break
				}
			}
			c.Close()
			out <- total
		}
	}()
	return out
}

// convergeCluster is a cluster of pods over 20 nodes and 50 namespaces, with policies: each
// selects an app of its namespace and allows it in from pods of a role in namespaces of a
// team, and out to its namespace and DNS. The node "node-0" holds a twentieth of the pods.
func convergeCluster(pods, policies int) netpol.Cluster {
	const nodes, namespaces = 20, 50
	c := netpol.Cluster{Namespaces: map[string]netpol.Namespace{}}
	for i := range namespaces {
		name := fmt.Sprintf("ns-%d", i)
		c.Namespaces[name] = netpol.Namespace{Name: name, Labels: map[string]string{"kubernetes.io/metadata.name": name, "team": fmt.Sprint(i % 4)}}
	}
	for i := range pods {
		c.Pods = append(c.Pods, netpol.Pod{
			Namespace: fmt.Sprintf("ns-%d", i%namespaces), Name: fmt.Sprintf("pod-%d", i), Node: fmt.Sprintf("node-%d", i%nodes),
			Labels: map[string]string{"app": fmt.Sprint(i % 10), "role": fmt.Sprint(i % 3)},
			IPs:    []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(i / 250), byte(i%250 + 1)})},
		})
	}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	http, dns := intstr.FromInt32(8080), intstr.FromInt32(53)
	for i := range policies {
		ns := fmt.Sprintf("ns-%d", i%namespaces)
		c.Policies = append(c.Policies, &networkingv1.NetworkPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("policy-%d", i)},
			Spec: networkingv1.NetworkPolicySpec{
				PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprint(i % 10)}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
				Ingress: []networkingv1.NetworkPolicyIngressRule{{
					From: []networkingv1.NetworkPolicyPeer{{
						NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprint(i % 4)}},
						PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"role": fmt.Sprint(i % 3)}},
					}},
					Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &http}},
				}},
				Egress: []networkingv1.NetworkPolicyEgressRule{
					{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}},
					{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}}},
				},
			},
		})
	}
	return c
}

// BenchmarkConverge: the time from one change of the cluster (a pod's role label flipped,
// which moves it in and out of policies' peers) to the node's table holding it: Compile,
// Build and Update, as weftd does on each change (ns/op, and each part's share). Beside it:
// the first write of the whole table, the periodic resync's Ensure (which reads the whole
// table to repair drift), the table's size, and the heap per pod that the cluster's pods and
// policies, the compiled rules and the table as built keep.
func BenchmarkConverge(b *testing.B) {
	for _, size := range []struct{ pods, policies int }{{100, 10}, {1000, 100}, {10000, 1000}} {
		b.Run(fmt.Sprintf("pods=%d/policies=%d", size.pods, size.policies), func(b *testing.B) {
			n := newTestNet(b)
			sns := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			c := convergeCluster(size.pods, size.policies)
			rules := netpol.Compile(c, "node-0", netpol.Options{SCTP: true})
			table := Build(rules, sns)
			runtime.GC()
			runtime.ReadMemStats(&after)
			heap := float64(after.HeapAlloc-before.HeapAlloc) / float64(size.pods)
			start := time.Now()
			n.ensure(table)
			first := time.Since(start)
			var compile, build, update time.Duration
			b.ResetTimer()
			for i := range b.N {
				p := &c.Pods[(i*7+1)%len(c.Pods)]
				p.Labels = map[string]string{"app": p.Labels["app"], "role": fmt.Sprint((i + 1) % 3)}
				t0 := time.Now()
				rules = netpol.Compile(c, "node-0", netpol.Options{SCTP: true})
				t1 := time.Now()
				table = Build(rules, sns)
				t2 := time.Now()
				if _, err := n.m.Update(table); err != nil {
					b.Fatal(err)
				}
				compile, build, update = compile+t1.Sub(t0), build+t2.Sub(t1), update+time.Since(t2)
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(b.N) }
			b.ReportMetric(ms(compile), "compile-ms/op")
			b.ReportMetric(ms(build), "build-ms/op")
			b.ReportMetric(ms(update), "update-ms/op")
			start = time.Now()
			if _, err := n.m.Ensure(table); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds()), "resync-ms")
			b.ReportMetric(heap, "heap-B/pod")
			b.ReportMetric(float64(first.Milliseconds()), "first-write-ms")
			elems := 0
			for _, s := range table.Sets {
				elems += len(s.Elems)
			}
			b.ReportMetric(float64(elems), "set-elements")
			b.ReportMetric(float64(len(table.Chains)), "chains")
		})
	}
}
