package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	// CNINetworkName is the CNI network name of the pods; the bridge plugin uses it for
	// its IPAM state too.
	CNINetworkName = "weft"
	// PodBridge is the bridge the CNI plugin makes in each node.
	PodBridge = "cni0"
	podIfName = "eth0"
)

// Pod is a network namespace wired to a node by the CNI bridge plugin, run directly
// (AddPod) or as the weft plugin's delegate (AddWeftPod).
//
// A pod has an address of each family whose subnet the node's subnet.env names: IP and
// Gateway for FLANNEL_SUBNET, IP6 and Gateway6 for FLANNEL_IPV6_SUBNET; the others are the
// zero Addr. Its IPv6 address, and its IPv6 gateway on cni0, are usable as soon as the pod
// is made: duplicate address detection is off in the pod's namespace, as in the node's.
type Pod struct {
	Name     string
	Node     *Node
	NS       string     // network namespace name
	IP       netip.Addr // eth0's IPv4 address, from the CNI result; zero in an IPv6-only pod
	Gateway  netip.Addr // its default IPv4 gateway (the node's cni0); zero without IP
	IP6      netip.Addr // eth0's IPv6 address, from the CNI result; zero without an IPv6 subnet
	Gateway6 netip.Addr // its default IPv6 gateway (the node's cni0); zero without IP6

	containerID string
	plugin      string // the CNI plugin binary the pod was made with
	config      []byte // the CNI config of the ADD, which DEL must repeat
	result      []byte // the ADD result, the prevResult of a CHECK
	deleted     bool   // guarded by the cluster's mu
}

// weftConfig is the weft plugin's network configuration for the harness's pods: flannel's
// keys, with the files in the node's directory and the delegate set up as kube-flannel's
// configuration sets it.
type weftConfig struct {
	CNIVersion string         `json:"cniVersion"`
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	SubnetFile string         `json:"subnetFile"`
	DataDir    string         `json:"dataDir"`
	IPAM       weftIPAM       `json:"ipam"`
	Delegate   map[string]any `json:"delegate"`
}

type weftIPAM struct {
	DataDir string `json:"dataDir"`
}

// cniConfig is the network configuration the bridge plugin gets, as a CNI configuration
// file would hold it, built from the node's subnet.env like flannel's CNI plugin does.
type cniConfig struct {
	CNIVersion string  `json:"cniVersion"`
	Name       string  `json:"name"`
	Type       string  `json:"type"`
	Bridge     string  `json:"bridge"`
	IsGateway  bool    `json:"isGateway"`
	IPMasq     bool    `json:"ipMasq"`
	MTU        int     `json:"mtu"`
	IPAM       cniIPAM `json:"ipam"`
}

type cniIPAM struct {
	Type    string       `json:"type"`
	Ranges  [][]cniRange `json:"ranges"`
	DataDir string       `json:"dataDir"`
	Routes  []cniRoute   `json:"routes"`
}

// cniRange is a host-local range: a whole subnet.
type cniRange struct {
	Subnet string `json:"subnet"`
}

type cniRoute struct {
	Dst string `json:"dst"`
}

// cniResult is the part of a CNI result the harness reads.
type cniResult struct {
	IPs []struct {
		Address string `json:"address"`
		Gateway string `json:"gateway"`
	} `json:"ips"`
}

// cniError is what a CNI plugin prints on stdout when it fails.
type cniError struct {
	Code    int    `json:"code"`
	Msg     string `json:"msg"`
	Details string `json:"details"`
}

// AddPod creates a pod on node: namespace <prefix>-<node>-<name>, and a CNI ADD of the bridge
// plugin (host-local IPAM over the node's subnets from subnet.env, IPv4, IPv6 or both, with a
// default route of each family via cni0) run inside the node's namespace, as a kubelet on
// that node would run it.
func (c *Cluster) AddPod(node *Node, name string) (*Pod, error) {
	if c.opts.CNIBin == "" {
		return nil, fmt.Errorf("cluster %s: AddPod needs Options.CNIBin", c.prefix)
	}
	if !isName(name) {
		return nil, fmt.Errorf("cluster %s: pod name %q: want 1 to 10 lower-case letters or digits", c.prefix, name)
	}
	env, err := node.SubnetEnv()
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	ipam := cniIPAM{Type: "host-local", DataDir: filepath.Join(node.Dir, "ipam")}
	for _, f := range []struct {
		sn    netip.Prefix
		route string
	}{{env.Subnet, "0.0.0.0/0"}, {env.IPv6Subnet, "::/0"}} {
		if f.sn.IsValid() {
			ipam.Ranges = append(ipam.Ranges, []cniRange{{Subnet: f.sn.Masked().String()}})
			ipam.Routes = append(ipam.Routes, cniRoute{Dst: f.route})
		}
	}
	if len(ipam.Ranges) == 0 {
		return nil, fmt.Errorf("pod %s: %s has neither FLANNEL_SUBNET nor FLANNEL_IPV6_SUBNET", name, node.SubnetFile)
	}
	cfg, err := json.Marshal(cniConfig{
		CNIVersion: "1.0.0",
		Name:       CNINetworkName,
		Type:       "bridge",
		Bridge:     PodBridge,
		IsGateway:  true,
		MTU:        env.MTU,
		IPAM:       ipam,
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s: encoding CNI config: %w", name, err)
	}
	return c.addPod(node, name, filepath.Join(c.opts.CNIBin, "bridge"), cfg)
}

// AddWeftPod creates a pod on node like AddPod, through the weft CNI plugin
// (Options.WeftCNI), which reads the node's subnet.env itself and delegates to the bridge and
// host-local plugins of Options.CNIBin. Its IPAM state is AddPod's, so both kinds of pod
// share the node's cni0 and subnet.
func (c *Cluster) AddWeftPod(node *Node, name string) (*Pod, error) {
	if c.opts.CNIBin == "" || c.opts.WeftCNI == "" {
		return nil, fmt.Errorf("cluster %s: AddWeftPod needs Options.CNIBin and Options.WeftCNI", c.prefix)
	}
	if !isName(name) {
		return nil, fmt.Errorf("cluster %s: pod name %q: want 1 to 10 lower-case letters or digits", c.prefix, name)
	}
	cfg, err := json.Marshal(weftConfig{
		// 1.1.0, so that STATUS may be run with it too.
		CNIVersion: "1.1.0",
		Name:       CNINetworkName,
		Type:       "weft",
		SubnetFile: node.SubnetFile,
		DataDir:    node.WeftDataDir(),
		IPAM:       weftIPAM{DataDir: filepath.Join(node.Dir, "ipam")},
		Delegate:   map[string]any{"bridge": PodBridge, "hairpinMode": true, "isDefaultGateway": true},
	})
	if err != nil {
		return nil, fmt.Errorf("pod %s: encoding CNI config: %w", name, err)
	}
	return c.addPod(node, name, c.opts.WeftCNI, cfg)
}

// WeftDataDir is where the weft plugin keeps the delegate configuration of the node's pods.
func (n *Node) WeftDataDir() string { return filepath.Join(n.Dir, "weft-cni") }

// ContainerID is the pod's CNI container ID.
func (p *Pod) ContainerID() string { return p.containerID }

// Addrs returns the pod's addresses, IPv4 first: one per family it has.
func (p *Pod) Addrs() []netip.Addr {
	var addrs []netip.Addr
	for _, a := range []netip.Addr{p.IP, p.IP6} {
		if a.IsValid() {
			addrs = append(addrs, a)
		}
	}
	return addrs
}

// addr is the pod's address that Stream uses: IP, or IP6 in an IPv6-only pod.
func (p *Pod) addr() netip.Addr {
	if p.IP.IsValid() {
		return p.IP
	}
	return p.IP6
}

// addPod makes the pod's namespace and runs the plugin's ADD with cfg.
func (c *Cluster) addPod(node *Node, name, plugin string, cfg []byte) (*Pod, error) {
	p := &Pod{
		Name:        name,
		Node:        node,
		NS:          node.NS + "-" + name,
		containerID: c.prefix + "-" + node.Name + "-" + name,
		plugin:      plugin,
		config:      cfg,
	}
	c.mu.Lock()
	for _, q := range c.pods {
		if q.NS == p.NS && !q.deleted {
			c.mu.Unlock()
			return nil, fmt.Errorf("pod %s on node %s exists already", name, node.Name)
		}
	}
	// Registered first, so that Close deletes a half-made pod too.
	c.pods = append(c.pods, p)
	c.mu.Unlock()

	if err := ip("netns", "add", p.NS); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	// Before the plugin makes eth0, so that it inherits it. The bridge plugin turns DAD off
	// on eth0 itself (unless its enabledad is set), but only once eth0 exists; the
	// namespace's defaults cover its link-local address too, and any other plugin.
	if err := enableIPv6(p.NS); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	if err := ip("-n", p.NS, "link", "set", "lo", "up"); err != nil {
		return nil, fmt.Errorf("pod %s: %w", name, err)
	}
	out, err := p.cni("ADD", p.config)
	if err != nil {
		return nil, err
	}
	p.result = out
	var res cniResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("pod %s: parsing CNI ADD result %q: %w", name, out, err)
	}
	// The first address of each family, with its gateway.
	for _, a := range res.IPs {
		pfx, err := netip.ParsePrefix(a.Address)
		if err != nil {
			return nil, fmt.Errorf("pod %s: CNI ADD result address %q: %w", name, a.Address, err)
		}
		addr, gw := &p.IP, &p.Gateway
		if pfx.Addr().Is6() {
			addr, gw = &p.IP6, &p.Gateway6
		}
		if addr.IsValid() {
			continue
		}
		*addr = pfx.Addr()
		if g, err := netip.ParseAddr(a.Gateway); err == nil {
			*gw = g
		}
	}
	if !p.IP.IsValid() && !p.IP6.IsValid() {
		return nil, fmt.Errorf("pod %s: CNI ADD result has no address: %s", name, out)
	}
	c.log.Logf("cluster %s: pod %s on node %s: namespace %s, %v", c.prefix, name, node.Name, p.NS, p.Addrs())
	return p, nil
}

// Check runs a CNI CHECK of the pod, with its ADD result as prevResult, as a runtime checks
// a running pod.
func (p *Pod) Check() error {
	var cfg map[string]json.RawMessage
	if err := json.Unmarshal(p.config, &cfg); err != nil {
		return fmt.Errorf("pod %s: decoding its CNI config: %w", p.Name, err)
	}
	cfg["prevResult"] = p.result
	data, err := json.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("pod %s: encoding CNI config: %w", p.Name, err)
	}
	_, err = p.cni("CHECK", data)
	return err
}

// cni runs the pod's plugin with the given command and config for the pod, inside the
// node's namespace, and returns its stdout.
func (p *Pod) cni(command string, config []byte) ([]byte, error) {
	c := p.Node.c
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", netnsExecArgs(p.Node.NS, p.plugin)...)
	cmd.Env = []string{
		"CNI_COMMAND=" + command,
		"CNI_CONTAINERID=" + p.containerID,
		"CNI_NETNS=" + filepath.Join(netnsDir, p.NS),
		"CNI_IFNAME=" + podIfName,
		"CNI_PATH=" + c.opts.CNIBin,
		// The plugin may run helpers (it looks for host-local in CNI_PATH, but
		// iptables and the like by PATH).
		"PATH=" + os.Getenv("PATH"),
	}
	cmd.Stdin = bytes.NewReader(config)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		var ce cniError
		if jerr := json.Unmarshal(stdout.Bytes(), &ce); jerr == nil && ce.Msg != "" {
			return nil, fmt.Errorf("pod %s on node %s: CNI %s: %w: code %d: %s %s",
				p.Name, p.Node.Name, command, err, ce.Code, ce.Msg, ce.Details)
		}
		return nil, fmt.Errorf("pod %s on node %s: CNI %s: %w: stdout %q stderr %q",
			p.Name, p.Node.Name, command, err, strings.TrimSpace(stdout.String()), strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Delete runs a CNI DEL for the pod and removes its namespace; deleting it again does
// nothing.
func (p *Pod) Delete() error {
	c := p.Node.c
	c.mu.Lock()
	if p.deleted {
		c.mu.Unlock()
		return nil
	}
	p.deleted = true
	c.mu.Unlock()

	var errs []string
	// DEL releases the address in host-local's state and the veth on the node; it must be
	// tried even if ADD failed half-way, as a kubelet would.
	if _, err := os.Stat(filepath.Join(netnsDir, p.Node.NS)); err == nil {
		if _, err := p.cni("DEL", p.config); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if err := destroyNetns(p.NS); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleting pod %s: %s", p.Name, strings.Join(errs, "; "))
	}
	return nil
}
