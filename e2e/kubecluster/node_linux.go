package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

const (
	// PauseImage is the sandbox image each node's containerd is told to use, pinned so that
	// its garbage collector keeps it; no registry serves it: it is to be imported.
	PauseImage = "registry.k8s.io/pause:3.10.1"
	// kubeletHealthz is where a kubelet serves /healthz, on its node's loopback.
	kubeletHealthz = "http://127.0.0.1:10248/healthz"
	// nodeStartTimeout bounds how long containerd and the kubelet get to answer.
	nodeStartTimeout = 60 * time.Second
)

// Node is a worker node: a network namespace of the underlay (see cluster.Node) with a mount
// and a UTS namespace of its own, running containerd and a kubelet.
type Node struct {
	*cluster.Node

	c *Cluster
	// MountNS is the file the node's mount namespace is pinned to.
	MountNS string
	// UTSNS is the file the node's UTS namespace is pinned to. Its host name is the node's
	// name, which host-network pods answer with (the e2e suite's checks expect a host-network
	// endpoint to say the name of its node, as the machine of a real node does).
	UTSNS string

	containerd *process
	kubelet    *process
	kubeProxy  *process
	// cgroup is the node's cgroup tree, the kubelet's cgroupRoot, under which it makes
	// kubepods for the pods; system holds the node's programs.
	cgroup, system *cgroupTree
}

// nodeMounts are the host paths a node has its own of, each a bind mount of a directory of
// the node's directory named after it.
func nodeMounts() []string {
	return []string{
		"/etc/cni/net.d", "/opt/cni/bin", "/var/lib/cni", "/var/lib/kubelet",
		"/var/log/pods", "/var/log/containers", "/run/containerd", "/run/flannel",
	}
}

// hostDir is the directory of the node's directory that is mounted on path.
func (n *Node) hostDir(path string) string {
	return filepath.Join(n.Dir, "fs", strings.ReplaceAll(strings.Trim(path, "/"), "/", "-"))
}

// addNode makes the node: the network namespace, the mount namespace, containerd, then the
// kubelet; it waits for both to answer, not for the node to register.
func (c *Cluster) addNode(name string) (*Node, error) {
	cn, err := c.net.AddNode(name)
	if err != nil {
		return nil, err
	}
	n := &Node{Node: cn, c: c, MountNS: filepath.Join(cn.Dir, "mntns"), UTSNS: filepath.Join(cn.Dir, "utsns")}
	c.nodes = append(c.nodes, n)
	// A real node has a default route; without one a host-network pod could not even try
	// the kubernetes Service's address, which kube-proxy translates after routing.
	if err := defaultRoute(cn); err != nil {
		return nil, err
	}
	if err := n.makeMountNS(); err != nil {
		return nil, err
	}
	if err := n.makeCgroups(); err != nil {
		return nil, err
	}
	if err := n.startContainerd(); err != nil {
		return nil, err
	}
	if err := n.startKubelet(); err != nil {
		return nil, err
	}
	if err := n.startKubeProxy(); err != nil {
		return nil, err
	}
	c.log.Logf("kubecluster: node %s: %s, logs in %s (containerd.log, kubelet.log, kube-proxy.log)", name, n.IP, n.Dir)
	return n, nil
}

// defaultRoute gives the node n a default route via the underlay, as a real node has.
func defaultRoute(n *cluster.Node) error {
	if out, err := exec.Command("ip", "-n", n.NS, "route", "add", "default", "via", cluster.UnderlayGateway).CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: default route: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeMountNS creates the node's mount namespace, pinned to n.MountNS, with its bind mounts,
// and its UTS namespace, pinned to n.UTSNS, named after the node. The mount namespace's
// propagation is private: nothing mounted in it (containerd's overlays, the kubelet's
// volumes) reaches the host, and it all goes with the namespace.
func (n *Node) makeMountNS() error {
	for _, pin := range []string{n.MountNS, n.UTSNS} {
		if err := os.WriteFile(pin, nil, 0o644); err != nil {
			return fmt.Errorf("node %s: creating the namespace pin %s: %w", n.Name, pin, err)
		}
	}
	var script strings.Builder
	fmt.Fprintf(&script, "set -e\nhostname %s\n", n.Name)
	for _, p := range nodeMounts() {
		src := n.hostDir(p)
		if err := os.MkdirAll(src, 0o755); err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		// The mount point is made on the host (an empty directory) if missing: the host
		// and the node share the file system under the mount.
		fmt.Fprintf(&script, "mkdir -p %s\nmount --bind %s %s\n", p, src, p)
	}
	argv := []string{"nsenter", "--net=" + netnsPath(n.NS), "--",
		"unshare", "--mount=" + n.MountNS, "--uts=" + n.UTSNS, "--propagation", "private", "sh", "-c", script.String()}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("node %s: making its mount namespace: %w: %s", n.Name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// makeCgroups makes the node's cgroup tree (cgroup_linux.go).
func (n *Node) makeCgroups() error {
	var err error
	if n.cgroup, err = newCgroupTree("/" + cgroupBase + "/" + n.c.net.Prefix() + "/" + n.Name); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	if n.system, err = n.cgroup.sub("system"); err != nil {
		return fmt.Errorf("node %s: %w", n.Name, err)
	}
	return nil
}

// run starts one of the node's programs in its namespaces and its system cgroup. The
// program is moved there as soon as it has started, before it has made any child: nsenter
// execs it in place, and containerd starts its shims only when asked for a container.
func (n *Node) run(name, log string, env, argv []string) (*process, error) {
	p, err := start(name+" of node "+n.Name, filepath.Join(n.Dir, log), env, n.inNode(argv...))
	if err != nil {
		return nil, err
	}
	if err := n.system.join(p.cmd.Process.Pid); err != nil {
		p.stop()
		return nil, fmt.Errorf("node %s: %w", n.Name, err)
	}
	return p, nil
}

// netnsPath is the file that names a network namespace made by ip netns.
func netnsPath(ns string) string { return "/var/run/netns/" + ns }

// inNode is the command prefix that runs a program in the node's network, mount and UTS
// namespaces; nsenter execs it in place.
func (n *Node) inNode(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + netnsPath(n.NS), "--mount=" + n.MountNS, "--uts=" + n.UTSNS, "--"}, argv...)
}

// containerdConfig is the node's containerd configuration, in containerd 2.4's version 4 (in
// which the sockets are the server plugins' addresses; `containerd config default` shows it).
func (n *Node) containerdConfig() string {
	root := filepath.Join(n.Dir, "containerd")
	return fmt.Sprintf(`version = 4
root = %q
state = "/run/containerd"

[plugins.'io.containerd.server.v1.grpc']
  address = "/run/containerd/containerd.sock"

[plugins.'io.containerd.server.v1.ttrpc']
  address = "/run/containerd/containerd.sock.ttrpc"

[plugins.'io.containerd.internal.v1.opt']
  path = %q

# Its socket would be the host's /var/run/nri, shared by every node; nothing here uses NRI.
[plugins.'io.containerd.nri.v1.nri']
  disable = true

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %q

[plugins.'io.containerd.cri.v1.runtime']
  # The pods' network namespaces under the node's state, not in the host's /var/run/netns.
  netns_mounts_under_state_dir = true
  # The kubelet asks for oom_score_adj -998 for every sandbox (and below 0 for guaranteed
  # pods); lowering it needs CAP_SYS_RESOURCE, which this machine's root lacks (CapEff
  # 0x1fffeffffff: bit 24 clear), and runc's init then dies ("failed to update
  # /proc/self/oom_score_adj: Permission denied"). Restricted, containerd clamps each value
  # to its own score, which a process may always keep or raise.
  restrict_oom_score_adj = true
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/opt/cni/bin']
    conf_dir = '/etc/cni/net.d'

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
`, root, filepath.Join(root, "opt"), PauseImage)
}

// startContainerd starts the node's containerd and waits for its socket.
func (n *Node) startContainerd() error {
	conf := filepath.Join(n.Dir, "containerd.toml")
	if err := os.WriteFile(conf, []byte(n.containerdConfig()), 0o644); err != nil {
		return fmt.Errorf("node %s: writing containerd's configuration: %w", n.Name, err)
	}
	// The shim is looked for on PATH, runc too (Debian's, in /usr/sbin).
	env := append(os.Environ(), "PATH="+n.c.opts.ContainerdBin+":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	p, err := n.run("containerd", "containerd.log", env,
		[]string{filepath.Join(n.c.opts.ContainerdBin, "containerd"), "--config", conf})
	if err != nil {
		return err
	}
	n.containerd = p
	sock := filepath.Join(n.hostDir("/run/containerd"), "containerd.sock")
	deadline := time.Now().Add(nodeStartTimeout)
	for {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
			return nil
		}
		if p.exited() || time.Now().After(deadline) {
			return fmt.Errorf("node %s: containerd not serving %s (%v; exited: %v); log %s:\n%s",
				n.Name, sock, err, p.exited(), p.logPath, p.tail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// kubeletConfig is the node's KubeletConfiguration. JSON is YAML, which the kubelet reads.
//
// Every node of the cluster shares the machine's disk and memory, so the kubelets' eviction
// thresholds are zero, as kind sets them: a percentage of the machine's disk (1% of 252 GB is
// 2.7 GB) taints the nodes with DiskPressure and evicts the test's pods on a machine that is
// merely full, which is not what the tests are about.
func (n *Node) kubeletConfig() string {
	return fmt.Sprintf(`{
  "apiVersion": "kubelet.config.k8s.io/v1beta1",
  "kind": "KubeletConfiguration",
  "failCgroupV1": false,
  "cgroupDriver": "cgroupfs",
  "cgroupsPerQOS": true,
  "cgroupRoot": %q,
  "enforceNodeAllocatable": [],
  "failSwapOn": false,
  "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
  "address": %q,
  "healthzBindAddress": "127.0.0.1",
  "healthzPort": 10248,
  "readOnlyPort": 0,
  "authentication": {"anonymous": {"enabled": true}, "webhook": {"enabled": false}},
  "authorization": {"mode": "AlwaysAllow"},
  "clusterDomain": %q,
  "clusterDNS": [%q],
  "evictionHard": {"memory.available": "0%%", "nodefs.available": "0%%", "nodefs.inodesFree": "0%%",
    "imagefs.available": "0%%", "imagefs.inodesFree": "0%%"},
  "imageGCHighThresholdPercent": 100,
  "imageGCLowThresholdPercent": 99
}
`, n.cgroup.rel, n.IP, ClusterDomain, n.c.opts.DNSServiceIP)
}

// startKubelet starts the node's kubelet and waits for its /healthz.
func (n *Node) startKubelet() error {
	conf := filepath.Join(n.Dir, "kubelet.json")
	if err := os.WriteFile(conf, []byte(n.kubeletConfig()), 0o644); err != nil {
		return fmt.Errorf("node %s: writing the kubelet's configuration: %w", n.Name, err)
	}
	p, err := n.run("kubelet", "kubelet.log", nil, []string{filepath.Join(n.c.opts.KubeBin, "kubelet"),
		"--config=" + conf,
		"--kubeconfig=" + n.c.adminKubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + n.IP.String(),
		"--v=2"})
	if err != nil {
		return err
	}
	n.kubelet = p
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var conn net.Conn
			err := n.Do(func() error {
				var d net.Dialer
				c, err := d.DialContext(ctx, network, addr)
				conn = c
				return err
			})
			return conn, err
		},
		DisableKeepAlives: true,
	}}
	deadline := time.Now().Add(nodeStartTimeout)
	for {
		resp, err := client.Get(kubeletHealthz)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %s", resp.Status)
		}
		if p.exited() || time.Now().After(deadline) {
			return fmt.Errorf("node %s: kubelet /healthz not ok (%v; exited: %v); log %s:\n%s",
				n.Name, err, p.exited(), p.logPath, p.tail())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// startKubeProxy starts the node's kube-proxy in nftables mode (Debian's nft; no iptables
// needed), without waiting for it.
func (n *Node) startKubeProxy() error {
	p, err := n.run("kube-proxy", "kube-proxy.log", nil, []string{filepath.Join(n.c.opts.KubeBin, "kube-proxy"),
		"--kubeconfig=" + n.c.adminKubeconfig,
		"--hostname-override=" + n.Name,
		"--cluster-cidr=" + n.c.opts.ClusterCIDR.String(),
		"--proxy-mode=nftables",
		// 0: leave the conntrack table's size alone; it is the host's, not the node's.
		"--conntrack-max-per-core=0",
		"--metrics-bind-address=127.0.0.1:10249",
		"--healthz-bind-address=127.0.0.1:10256",
		"--nodeport-addresses=primary",
		"--v=2"})
	if err != nil {
		return err
	}
	n.kubeProxy = p
	return nil
}

// stop stops the kubelet, then kills everything of the node's namespaces (containerd, its
// shims, the containers) and lets go of the mount namespace.
func (n *Node) stop() error {
	for _, p := range []*process{n.kubeProxy, n.kubelet} {
		if p != nil {
			p.stop()
		}
	}
	if n.containerd != nil {
		n.containerd.stop()
	}
	var errs []error
	if err := killNamespaces(netnsPath(n.NS), n.MountNS); err != nil {
		errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
	}
	if n.cgroup != nil {
		if err := n.cgroup.remove(); err != nil {
			errs = append(errs, fmt.Errorf("node %s: %w", n.Name, err))
		}
	}
	// MNT_DETACH: a pin goes even if something still looks at it; the namespace (and its
	// mounts) go with the last process and reference.
	for _, pin := range []string{n.MountNS, n.UTSNS} {
		if err := syscall.Unmount(pin, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) &&
			!errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("node %s: unmounting the namespace pin %s: %w", n.Name, pin, err))
		}
	}
	return errors.Join(errs...)
}
