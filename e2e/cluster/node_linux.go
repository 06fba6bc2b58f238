package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/weftnet/weft/subnet"
)

const (
	// HealthzPort is where each weftd serves /healthz and /readyz, on 127.0.0.1 inside its
	// node namespace (every node has its own loopback, so they do not clash).
	HealthzPort = 8285
	healthzIP   = "127.0.0.1"

	// stopTimeout is how long Stop waits for weftd to exit before it kills it.
	stopTimeout = 15 * time.Second
	// closeStopTimeout is the same for Close, which is in a hurry and kills anyway.
	closeStopTimeout = 3 * time.Second
	// logTailLines is how much of a node's log goes into an error about it.
	logTailLines = 25
)

// Node is a network namespace with an eth0 on the underlay, running weftd.
type Node struct {
	c *Cluster

	Name       string     // as given to AddNode
	Index      int        // 1 for the first node, 2 for the second...
	NS         string     // network namespace name
	IP         netip.Addr // eth0's IPv4 address on the underlay (in Underlay)
	IP6        netip.Addr // eth0's IPv6 address on the underlay (in Underlay6; see AddNode)
	Dir        string     // the node's files
	LogPath    string     // weftd's stdout and stderr, every run appended
	SubnetFile string     // the subnet.env weftd writes
	// In Kubernetes mode (Options.Kube): the files weftd reads, and where WriteToken puts
	// a token for a kubeconfig that names a token file; "" otherwise.
	KubeconfigPath string
	NetConfPath    string
	TokenPath      string

	http *http.Client // reaches the node's loopback from this process

	mu   sync.Mutex
	proc *process // the current or last weftd run; nil before the first
	runs int
}

// AddNode creates a node: namespace <prefix>-<name>, eth0 on the underlay at 192.0.2.(10+i)/24
// and fd77:77::(10+i)/64 for the i-th node (the IPv6 address's last group spells the IPv4
// one's last byte in decimal digits: 192.0.2.11 and fd77:77::11), a default IPv6 route via
// UnderlayGateway6, loopback up, IPv4 and IPv6 forwarding on, and (if Options.Weftd is set)
// starts weftd in it. It does not wait for weftd: call WaitReady.
//
// Every IPv6 address in the node is usable at once: duplicate address detection is off in
// the node's namespace (see enableIPv6), for eth0 and for the devices made later (cni0 and
// its veths, weftd's devices).
func (c *Cluster) AddNode(name string) (*Node, error) {
	if !isName(name) || name == underlayName {
		return nil, fmt.Errorf("cluster %s: node name %q: want 1 to 10 lower-case letters or digits, not %q",
			c.prefix, name, underlayName)
	}
	c.mu.Lock()
	for _, n := range c.nodes {
		if n.Name == name {
			c.mu.Unlock()
			return nil, fmt.Errorf("cluster %s: node %s exists already", c.prefix, name)
		}
	}
	index := len(c.nodes) + 1
	if index > maxNodes {
		c.mu.Unlock()
		return nil, fmt.Errorf("cluster %s: at most %d nodes", c.prefix, maxNodes)
	}
	n := &Node{
		c:     c,
		Name:  name,
		Index: index,
		NS:    c.prefix + "-" + name,
		IP:    underlayIP(firstNodeHost + index),
		IP6:   nodeIP6(firstNodeHost + index),
		Dir:   filepath.Join(c.dir, name),
	}
	n.LogPath = filepath.Join(n.Dir, "weftd.log")
	n.SubnetFile = filepath.Join(n.Dir, "subnet.env")
	if c.opts.Kube != nil {
		n.setKubeFiles()
	}
	n.http = &http.Client{
		Timeout: 2 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialIn(ctx, n.NS, network, addr)
			},
			DisableKeepAlives: true,
		},
	}
	// Registered before anything exists, so that Close removes a half-made node too.
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()

	if err := os.MkdirAll(n.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("node %s: creating %s: %w", name, n.Dir, err)
	}
	// The underlay end of the veth is named after the node (within the 15 characters a
	// device name may have).
	peer := "ve-" + name
	if err := ip("netns", "add", n.NS); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	// Before eth0 is made, so that it inherits it.
	if err := enableIPv6(n.NS); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	for _, args := range [][]string{
		{"-n", n.NS, "link", "set", "lo", "up"},
		{"-n", c.ul, "link", "add", peer, "type", "veth", "peer", "name", "eth0", "netns", n.NS},
		{"-n", c.ul, "link", "set", peer, "master", underlayBridge, "up"},
		{"-n", n.NS, "addr", "add", fmt.Sprintf("%s/%d", n.IP, underlayBits), "dev", "eth0"},
		// nodad as well as accept_dad=0: the address must never be tentative.
		{"-n", n.NS, "addr", "add", fmt.Sprintf("%s/%d", n.IP6, underlayBits6), "dev", "eth0", "nodad"},
		{"-n", n.NS, "link", "set", "eth0", "up"},
		// Once eth0 is up, so that the gateway is on a link that is.
		{"-n", n.NS, "-6", "route", "add", "default", "via", UnderlayGateway6, "dev", "eth0"},
	} {
		if err := ip(args...); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	// A node routes for its pods; the CNI bridge plugin would turn it on too, but weftd may
	// program routes before the first pod exists. IPv6's "all" sets every device's and
	// "default"'s too, so cni0 and weftd's devices forward as well.
	for _, key := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
		if err := writeSysctl(n.NS, key, "1"); err != nil {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
	}
	if c.opts.Kube != nil {
		if err := n.writeKubeFiles(); err != nil {
			return nil, err
		}
	}
	if c.opts.Weftd != "" {
		if err := n.Start(); err != nil {
			return nil, err
		}
	}
	if c.opts.Weftd != "" {
		c.log.Logf("cluster %s: node %s: namespace %s, eth0 %s %s, weftd log %s", c.prefix, name, n.NS, n.IP, n.IP6, n.LogPath)
	} else {
		c.log.Logf("cluster %s: node %s: namespace %s, eth0 %s %s, no weftd", c.prefix, name, n.NS, n.IP, n.IP6)
	}
	return n, nil
}

// underlayIP is the underlay's IPv4 address whose last byte is host: the gateway's (1), an
// etcd member's (see EtcdMember) or a node's.
func underlayIP(host int) netip.Addr {
	b := netip.MustParsePrefix(Underlay).Addr().As4()
	b[3] = byte(host)
	return netip.AddrFrom4(b)
}

// nodeIP6 is the IPv6 underlay address of the node whose IPv4 one ends in host: Underlay6's
// prefix with host's decimal digits as its last group (11 gives fd77:77::11, that is
// 0x0011), so that the two addresses read alike.
func nodeIP6(host int) netip.Addr {
	// Each decimal digit becomes a hex digit; host < 256 has at most three, which fit.
	v := 0
	for _, d := range strconv.Itoa(host) {
		v = v<<4 | int(d-'0')
	}
	b := netip.MustParsePrefix(Underlay6).Addr().As16()
	b[14], b[15] = byte(v>>8), byte(v)
	return netip.AddrFrom16(b)
}

// weftdArgs are weftd's flags for this node.
func (n *Node) weftdArgs() []string {
	kube := n.c.opts.Kube != nil
	var args []string
	if kube {
		args = n.kubeArgs()
	} else {
		args = []string{"--etcd-endpoints=" + strings.Join(n.c.EtcdEndpoints(), ",")}
	}
	args = append(args,
		"--iface=eth0",
		"--subnet-file="+n.SubnetFile,
		"--healthz-ip="+healthzIP,
		"--healthz-port="+strconv.Itoa(HealthzPort),
	)
	if !kube && n.c.opts.EtcdPrefix != DefaultEtcdPrefix {
		args = append(args, "--etcd-prefix="+n.c.opts.EtcdPrefix)
	}
	return append(args, n.c.opts.WeftdArgs...)
}

// Start starts weftd in the node. It is an error if it is running.
func (n *Node) Start() error {
	if n.c.opts.Weftd == "" {
		return fmt.Errorf("node %s: no weftd binary (Options.Weftd)", n.Name)
	}
	return n.StartDaemon(append([]string{n.c.opts.Weftd}, n.weftdArgs()...)...)
}

// Running reports whether weftd runs in the node.
func (n *Node) Running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.proc != nil && !n.proc.exited()
}

// Pid is the process ID of the node's weftd, 0 if it is not running.
func (n *Node) Pid() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || n.proc.exited() {
		return 0
	}
	return n.proc.cmd.Process.Pid
}

// Stop sends sig to weftd and waits for it to exit, and returns its exit status. If it has
// not exited after 15 s it is killed and Stop returns an error with the status too.
func (n *Node) Stop(sig syscall.Signal) (*os.ProcessState, error) {
	return n.stop(sig, stopTimeout)
}

func (n *Node) stop(sig syscall.Signal, timeout time.Duration) (*os.ProcessState, error) {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil {
		return nil, fmt.Errorf("node %s: weftd was never started", n.Name)
	}
	if p.exited() {
		return p.state, fmt.Errorf("node %s: weftd is not running (it exited: %v)", n.Name, p.state)
	}
	killed, err := p.stop(sig, timeout)
	if err != nil {
		return nil, fmt.Errorf("node %s: weftd: %w", n.Name, err)
	}
	if killed {
		return p.state, fmt.Errorf("node %s: weftd did not exit within %v of %v; killed", n.Name, timeout, sig)
	}
	return p.state, nil
}

// stopForClose ends weftd for Close: SIGTERM, and SIGKILL soon after.
func (n *Node) stopForClose() {
	if n.Running() {
		if _, err := n.stop(syscall.SIGTERM, closeStopTimeout); err != nil {
			n.c.log.Logf("cluster %s: %v", n.c.prefix, err)
		}
	}
}

// ExitState is the exit status of the last weftd run, nil while it runs or if it never ran.
func (n *Node) ExitState() *os.ProcessState {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.proc == nil || !n.proc.exited() {
		return nil
	}
	return n.proc.state
}

// WaitReady waits until weftd has written subnet.env and answers 200 on /readyz, and fails
// early if weftd exits. Errors carry the end of the node's log.
func (n *Node) WaitReady(timeout time.Duration) error {
	start := time.Now()
	deadline := start.Add(timeout)
	var last string
	for {
		n.mu.Lock()
		p := n.proc
		n.mu.Unlock()
		if p == nil {
			return fmt.Errorf("node %s: weftd was never started", n.Name)
		}
		if p.exited() {
			return fmt.Errorf("node %s: weftd exited (%v) before it was ready; log %s:\n%s",
				n.Name, p.state, n.LogPath, n.LogTail(logTailLines))
		}
		_, envErr := os.Stat(n.SubnetFile)
		code, body, httpErr := n.Get("/readyz")
		switch {
		case envErr == nil && httpErr == nil && code == http.StatusOK:
			n.c.log.Logf("cluster %s: node %s ready %v after weftd started", n.c.prefix, n.Name,
				time.Since(p.started).Round(time.Millisecond))
			return nil
		case envErr != nil:
			last = "no subnet.env yet"
		case httpErr != nil:
			last = "subnet.env written; /readyz: " + httpErr.Error()
		default:
			last = fmt.Sprintf("subnet.env written; /readyz: %d %s", code, strings.TrimSpace(body))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node %s: weftd not ready after %v (%s); log %s:\n%s",
				n.Name, timeout, last, n.LogPath, n.LogTail(logTailLines))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Get fetches a path of weftd's health server (/healthz, /readyz) from inside the node and
// returns the status code and the body.
func (n *Node) Get(path string) (int, string, error) {
	url := fmt.Sprintf("http://%s:%d%s", healthzIP, HealthzPort, path)
	resp, err := n.http.Get(url)
	if err != nil {
		return 0, "", fmt.Errorf("GET %s in node %s: %w", url, n.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return resp.StatusCode, "", fmt.Errorf("reading GET %s in node %s: %w", url, n.Name, err)
	}
	return resp.StatusCode, string(body), nil
}

// SubnetEnv reads the node's subnet.env.
func (n *Node) SubnetEnv() (subnet.Env, error) {
	e, err := subnet.ReadEnv(n.SubnetFile)
	if err != nil {
		return subnet.Env{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return e, nil
}

// Subnet is the node's pod subnet, from its subnet.env.
func (n *Node) Subnet() (netip.Prefix, error) {
	e, err := n.SubnetEnv()
	if err != nil {
		return netip.Prefix{}, err
	}
	if !e.Subnet.IsValid() {
		return netip.Prefix{}, fmt.Errorf("node %s: %s has no FLANNEL_SUBNET", n.Name, n.SubnetFile)
	}
	return e.Subnet.Masked(), nil
}

// Subnet6 is the node's IPv6 pod subnet, from its subnet.env.
func (n *Node) Subnet6() (netip.Prefix, error) {
	e, err := n.SubnetEnv()
	if err != nil {
		return netip.Prefix{}, err
	}
	if !e.IPv6Subnet.IsValid() {
		return netip.Prefix{}, fmt.Errorf("node %s: %s has no FLANNEL_IPV6_SUBNET", n.Name, n.SubnetFile)
	}
	return e.IPv6Subnet.Masked(), nil
}

// WriteSubnetEnv writes the node's subnet.env in weftd's place, for clusters without weftd.
func (n *Node) WriteSubnetEnv(e subnet.Env) error {
	if err := subnet.WriteEnv(n.SubnetFile, e); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nil
}

// Exec runs a command inside the node's network namespace and returns its combined output.
// The error includes the output.
func (n *Node) Exec(args ...string) (string, error) {
	if len(args) == 0 {
		return "", fmt.Errorf("node %s: Exec: no command", n.Name)
	}
	out, err := run("ip", netnsExecArgs(n.NS, args...)...)
	if err != nil {
		return out, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return out, nil
}

// RouteTo returns the node's main-table route to exactly dst, IPv4 or IPv6 (as `ip route`
// prints it), or "" if it has none.
func (n *Node) RouteTo(dst netip.Prefix) (string, error) {
	// ip lists IPv4 routes unless told the family, whatever the prefix.
	family := "-4"
	if dst.Addr().Is6() {
		family = "-6"
	}
	out, err := run("ip", "-n", n.NS, family, "route", "show", "exact", dst.String())
	if err != nil {
		return "", fmt.Errorf("node %s: %w", n.Name, err)
	}
	return strings.TrimSpace(out), nil
}

// Ping pings an address, IPv4 or IPv6, from the node itself (its eth0 side of the underlay,
// or its pod routes), like Ping from a pod.
func (n *Node) Ping(to netip.Addr, count int, interval time.Duration) (sent, received int, err error) {
	return ping(n.NS, to, count, interval)
}

// LogTail returns the last lines of the node's weftd log.
func (n *Node) LogTail(lines int) string { return logTail(n.LogPath, lines) }

// Signal sends sig to the node's weftd and returns at once: SIGSTOP freezes it, SIGCONT
// lets it go on. Stop is for signals that end it.
func (n *Node) Signal(sig syscall.Signal) error {
	n.mu.Lock()
	p := n.proc
	n.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("node %s: weftd is not running", n.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("node %s: weftd: sending %v: %w", n.Name, sig, err)
	}
	return nil
}
