package kubecluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// PingInterval is how often each pod of a ping mesh pings each other one: flannel's users
// judge a change of the network by the pings it loses at that rate. A lost ping is about
// 12 ms of outage here (busybox's ping sends some 85 a second at -i 0.01).
const PingInterval = 10 * time.Millisecond

// PodState is what tells a pod's incarnation apart: a restarted or re-created pod changes
// at least one of these.
type PodState struct {
	Name, Node string
	UID        types.UID
	IP         netip.Addr
	// Sandbox is the ID of the pod's sandbox in its node's containerd (a new sandbox is a
	// new network namespace, and a new address from the CNI plugin).
	Sandbox string
	// Restarts is the sum of its containers' restart counts.
	Restarts int32
}

// PingPod describes a pod of a mesh: named name, on node, running image's busybox sleeping;
// the pings run in it through kubectl exec (StartPings).
func PingPod(name, node, image string) *corev1.Pod {
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Labels: map[string]string{"app": "weft-e2e-ping"}},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{
				Name:    "ping",
				Image:   image,
				Command: []string{"sleep", "86400"},
			}},
		},
	}
}

// RunPods creates the pods and waits until each runs with its containers ready, then
// returns their states, in the order given.
func (c *Cluster) RunPods(ctx context.Context, pods ...*corev1.Pod) ([]PodState, error) {
	for _, p := range pods {
		if _, err := c.Client.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("creating pod %s: %w", p.Name, err)
		}
	}
	var states []PodState
	for _, p := range pods {
		for {
			s, err := c.PodState(ctx, p.Namespace, p.Name)
			if err == nil {
				states = append(states, s)
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("pod %s not running: %v: %w", p.Name, err, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return states, nil
}

// PodState returns a running pod's state; an error if it is not running with its
// containers ready.
func (c *Cluster) PodState(ctx context.Context, namespace, name string) (PodState, error) {
	p, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return PodState{}, err
	}
	if p.Status.Phase != corev1.PodRunning {
		return PodState{}, fmt.Errorf("pod %s: phase %s", name, p.Status.Phase)
	}
	s := PodState{Name: name, Node: p.Spec.NodeName, UID: p.UID}
	for _, cs := range p.Status.ContainerStatuses {
		if !cs.Ready {
			return PodState{}, fmt.Errorf("pod %s: container %s not ready", name, cs.Name)
		}
		s.Restarts += cs.RestartCount
	}
	if s.IP, err = netip.ParseAddr(p.Status.PodIP); err != nil {
		return PodState{}, fmt.Errorf("pod %s: IP %q: %w", name, p.Status.PodIP, err)
	}
	n := c.node(p.Spec.NodeName)
	if n == nil {
		return PodState{}, fmt.Errorf("pod %s: on %q, not a node of this cluster", name, p.Spec.NodeName)
	}
	if s.Sandbox, err = n.Sandbox(ctx, p.UID); err != nil {
		return PodState{}, fmt.Errorf("pod %s: %w", name, err)
	}
	return s, nil
}

// node returns the node named name, or nil.
func (c *Cluster) node(name string) *Node {
	for _, n := range c.nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Sandbox returns the ID of the running pod sandbox of the pod with that UID in the node's
// containerd, as the CRI labels it. More than one (the kubelet made a new one beside the
// old) is an error.
func (n *Node) Sandbox(ctx context.Context, uid types.UID) (string, error) {
	out, err := n.Ctr(ctx, "containers", "list", "--quiet",
		fmt.Sprintf(`labels."io.cri-containerd.kind"==sandbox,labels."io.kubernetes.pod.uid"==%s`, uid))
	if err != nil {
		return "", err
	}
	ids := strings.Fields(out)
	if len(ids) != 1 {
		return "", fmt.Errorf("node %s: %d sandboxes of pod %s: %v", n.Name, len(ids), uid, ids)
	}
	return ids[0], nil
}

// Ctr runs containerd's ctr against the node's containerd, in the CRI's namespace, and
// returns its output.
func (n *Node) Ctr(ctx context.Context, args ...string) (string, error) {
	argv := n.inNode(append([]string{filepath.Join(n.c.opts.ContainerdBin, "ctr"), "--address",
		"/run/containerd/containerd.sock", "--namespace", "k8s.io"}, args...)...)
	return runOut(ctx, argv)
}

// PingPair is one direction of a mesh: From pings To.
type PingPair struct {
	From, To PodState
	pid      string    // of the ping in From's container
	log      string    // its output there
	started  time.Time // when its kubectl exec returned
}

// Pings is a running mesh: every pod pings every other one every PingInterval.
type Pings struct {
	c     *Cluster
	pairs []*PingPair
	start time.Time
}

// StartPings starts, in each pod, one busybox ping of each other pod's address every
// PingInterval, in the background of the pod's container (kubectl exec returns at once; the
// ping outlives it), its output in a file there.
//
// What ping reports is not all the network's doing: busybox's ping reads its replies through
// a raw socket with a receive buffer of some 14 KB (it sets SO_RCVBUF itself), which every
// ICMP packet reaching the pod fills, so a ping starved of CPU for a few tens of
// milliseconds loses replies that did arrive. So the pods' own network namespaces also count
// (nftables counters, set up from the host) the requests that leave and the replies that
// come in, per peer: PingResult's NetSent and NetReceived.
func (c *Cluster) StartPings(ctx context.Context, pods []PodState) (*Pings, error) {
	p := &Pings{c: c, start: time.Now()}
	for _, from := range pods {
		if err := c.countPings(ctx, from, pods); err != nil {
			return p, err
		}
	}
	for _, from := range pods {
		for _, to := range pods {
			if from.Name == to.Name {
				continue
			}
			pair := &PingPair{From: from, To: to, log: "/tmp/ping-" + to.Name + ".log"}
			out, err := c.Kubectl(ctx, "exec", from.Name, "--", "sh", "-c",
				fmt.Sprintf("ping -i %g %s >%s 2>&1 </dev/null & echo $!", PingInterval.Seconds(), to.IP, pair.log))
			if err != nil {
				return p, err
			}
			pair.started = time.Now()
			pair.pid = strings.TrimSpace(out)
			if _, err := strconv.Atoi(pair.pid); err != nil {
				return p, fmt.Errorf("ping from %s to %s: no process ID but %q", from.Name, to.Name, out)
			}
			p.pairs = append(p.pairs, pair)
		}
	}
	return p, nil
}

// Start is when the mesh started, the origin of PingResult.Describe's times.
func (p *Pings) Start() time.Time { return p.start }

// PingResult is what one pair's ping saw.
type PingResult struct {
	From, To string
	// Sent counts the requests up to the last one answered; Lost those of them with no
	// answer. Requests after the last answer (the one in flight when the ping was stopped)
	// are not counted.
	Sent, Lost int
	// Gaps are the runs of consecutive unanswered requests.
	Gaps []PingGap
	// NetSent and NetReceived count the echo requests to the peer that left the pod's
	// network namespace, and the replies from it that came in, whether ping read them or
	// not (see StartPings).
	NetSent, NetReceived int
}

// PingGap is a run of Len unanswered requests from sequence number Seq on, sent about At:
// busybox's ping prints no times, and sends at a steady rate a little below the interval's,
// so At is estimated from the pair's start and stop and the number sent in between.
type PingGap struct {
	Seq, Len int
	At       time.Time
}

// Describe says what the pair saw, its gaps' times relative to origin.
func (r PingResult) Describe(origin time.Time) string {
	s := fmt.Sprintf("%s -> %s: %d sent, %d lost on the network (%d requests, %d replies)", r.From, r.To,
		r.Sent, r.NetSent-r.NetReceived, r.NetSent, r.NetReceived)
	if len(r.Gaps) > 0 {
		s += fmt.Sprintf("; ping itself saw %d unanswered", r.Lost)
	}
	for i, g := range r.Gaps {
		sep := ", "
		if i == 0 {
			sep = ": "
		}
		s += fmt.Sprintf("%s%d at +%v", sep, g.Len, g.At.Sub(origin).Round(100*time.Millisecond))
	}
	return s
}

// Stop interrupts every ping (SIGINT: it prints its summary and exits) and returns what each
// saw.
func (p *Pings) Stop(ctx context.Context) ([]PingResult, error) {
	var results []PingResult
	var errs []error
	for _, pair := range p.pairs {
		out, err := p.c.Kubectl(ctx, "exec", pair.From.Name, "--", "sh", "-c",
			fmt.Sprintf("kill -INT %s; sleep 0.5; cat %s", pair.pid, pair.log))
		stopped := time.Now()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		r, err := parsePing(out)
		if err != nil {
			errs = append(errs, fmt.Errorf("ping from %s to %s: %w", pair.From.Name, pair.To.Name, err))
			continue
		}
		r.From, r.To = pair.From.Name, pair.To.Name
		if r.NetSent, r.NetReceived, err = p.c.pingCounters(ctx, pair.From, pair.To.IP); err != nil {
			errs = append(errs, err)
			continue
		}
		for i, g := range r.Gaps {
			r.Gaps[i].At = pair.started.Add(time.Duration(float64(stopped.Sub(pair.started)) * float64(g.Seq) / float64(r.Sent)))
		}
		results = append(results, r)
	}
	return results, errors.Join(errs...)
}

// pingTable is the nftables table that counts a pod's pings, in its network namespace.
const pingTable = "weft-e2e-ping"

// podNetns returns the path of the network namespace of the pod's sandbox: that of the
// sandbox's process (containerd's tasks are the host's processes).
func (c *Cluster) podNetns(ctx context.Context, pod PodState) (string, error) {
	n := c.node(pod.Node)
	if n == nil {
		return "", fmt.Errorf("pod %s: on %q, not a node of this cluster", pod.Name, pod.Node)
	}
	out, err := n.Ctr(ctx, "tasks", "list")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		// TASK PID STATUS
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == pod.Sandbox {
			return "/proc/" + f[1] + "/ns/net", nil
		}
	}
	return "", fmt.Errorf("pod %s: no task of its sandbox %s on node %s:\n%s", pod.Name, pod.Sandbox, n.Name, out)
}

// countPings sets up, in from's network namespace, counters of the echo requests to and
// replies from each other pod, from zero: the counters of an earlier mesh of the same pods go.
func (c *Cluster) countPings(ctx context.Context, from PodState, pods []PodState) error {
	netns, err := c.podNetns(ctx, from)
	if err != nil {
		return err
	}
	cmds := [][]string{
		{"add", "table", "inet", pingTable},
		{"flush", "table", "inet", pingTable},
		{"add", "chain", "inet", pingTable, "out", "{ type filter hook output priority 0; }"},
		{"add", "chain", "inet", pingTable, "in", "{ type filter hook input priority 0; }"},
	}
	for _, to := range pods {
		if to.Name != from.Name {
			cmds = append(cmds,
				[]string{"add", "rule", "inet", pingTable, "out", "ip", "daddr", to.IP.String(), "icmp", "type", "echo-request", "counter"},
				[]string{"add", "rule", "inet", pingTable, "in", "ip", "saddr", to.IP.String(), "icmp", "type", "echo-reply", "counter"})
		}
	}
	for _, cmd := range cmds {
		if _, err := runOut(ctx, append([]string{"nsenter", "--net=" + netns, "nft"}, cmd...)); err != nil {
			return fmt.Errorf("pod %s: counting pings: %w", from.Name, err)
		}
	}
	return nil
}

// pingCounter matches a counting rule as nft lists it: "ip daddr 10.244.1.2 icmp type
// echo-request counter packets 12 bytes 1008".
var pingCounter = regexp.MustCompile(`ip (daddr|saddr) (\S+) icmp type (echo-request|echo-reply) counter packets (\d+)`)

// pingCounters reads the counters countPings set up in from's network namespace for peer.
func (c *Cluster) pingCounters(ctx context.Context, from PodState, peer netip.Addr) (sent, received int, err error) {
	netns, err := c.podNetns(ctx, from)
	if err != nil {
		return 0, 0, err
	}
	out, err := runOut(ctx, []string{"nsenter", "--net=" + netns, "nft", "list", "table", "inet", pingTable})
	if err != nil {
		return 0, 0, fmt.Errorf("pod %s: reading the ping counters: %w", from.Name, err)
	}
	found := 0
	for _, m := range pingCounter.FindAllStringSubmatch(out, -1) {
		if m[2] != peer.String() {
			continue
		}
		n, _ := strconv.Atoi(m[4]) // \d+
		if m[3] == "echo-request" {
			sent = n
		} else {
			received = n
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("pod %s: %d counters for %s in:\n%s", from.Name, found, peer, out)
	}
	return sent, received, nil
}

// busyboxPingReply matches a reply line of busybox's ping: "64 bytes from 10.244.1.2: seq=12
// ttl=62 time=0.250 ms"; a duplicate ends in "(DUP!)".
var busyboxPingReply = regexp.MustCompile(`^\d+ bytes from [^:]+: seq=(\d+) `)

// parsePing reads a busybox ping's output: the replies' sequence numbers (16 bits, which
// wrap after 65536 requests) say which requests were answered.
func parsePing(out string) (PingResult, error) {
	var seqs []int
	var last, wraps int
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		m := busyboxPingReply.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasSuffix(sc.Text(), "(DUP!)") {
			continue
		}
		seq, _ := strconv.Atoi(m[1]) // \d+ of at most 5 digits
		if len(seqs) > 0 && seq+wraps < last-1<<15 {
			wraps += 1 << 16
		}
		last = seq + wraps
		seqs = append(seqs, last)
	}
	if len(seqs) == 0 {
		return PingResult{}, fmt.Errorf("no reply at all:\n%s", out)
	}
	if !strings.Contains(out, "packets transmitted") {
		return PingResult{}, fmt.Errorf("no summary, so the ping did not run to the end:\n%s", lastLines(out, 5))
	}
	sort.Ints(seqs)
	r := PingResult{Sent: seqs[len(seqs)-1] + 1}
	answered := map[int]bool{}
	for _, s := range seqs {
		answered[s] = true
	}
	for s := 0; s < r.Sent; s++ {
		if answered[s] {
			continue
		}
		r.Lost++
		if n := len(r.Gaps); n > 0 && r.Gaps[n-1].Seq+r.Gaps[n-1].Len == s {
			r.Gaps[n-1].Len++
		} else {
			r.Gaps = append(r.Gaps, PingGap{Seq: s, Len: 1})
		}
	}
	return r, nil
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// DeletePods deletes the pods and waits until they are gone from the API server (their
// sandboxes torn down by the kubelet, the CNI DEL done).
func (c *Cluster) DeletePods(ctx context.Context, namespace string, names ...string) error {
	for _, name := range names {
		if err := c.Client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			return fmt.Errorf("deleting pod %s: %w", name, err)
		}
	}
	for _, name := range names {
		for {
			_, err := c.Client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("pod %s not gone: %w", name, ctx.Err())
			case <-time.After(500 * time.Millisecond):
			}
		}
	}
	return nil
}

// runOut runs argv and returns its standard output; the error holds its standard error
// too, which is kept apart because ctr warns there on every run (cgroup v1).
func runOut(ctx context.Context, argv []string) (string, error) {
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("%s: %w: %s%s", strings.Join(argv, " "), err, out, bytes.TrimSpace(stderr.Bytes()))
	}
	return string(out), nil
}
