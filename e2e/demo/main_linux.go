package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

const (
	pingCount    = 3
	pingInterval = 20 * time.Millisecond
	// A node learns of the peers that joined after it through the etcd watch, a moment
	// after they are ready; pings wait that long for a first reply before they count.
	convergeTimeout = 10 * time.Second
	readyTimeout    = 30 * time.Second
)

// pingsFailed makes the exit status non-zero without another message: the table said it.
type pingsFailed struct{}

func (pingsFailed) Error() string { return "some pings failed" }

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, pingsFailed{}) {
			fmt.Fprintln(os.Stderr, "weft-demo:", err)
		}
		os.Exit(1)
	}
}

// config is the command line.
type config struct {
	weftd, cniBin string
	backend       string
	nodes, pods   int
	keep          bool
	teardown      bool
	prefix        string
	dir           string
	verbose       bool
	serveEtcd     string
	dualStack     bool
}

func parseFlags(args []string, out io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("weft-demo", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.weftd, "weftd", "", "the weftd binary the nodes run (required)")
	fs.StringVar(&c.cniBin, "cni-bin", "", "directory of the CNI plugins bridge and host-local (required)")
	fs.StringVar(&c.backend, "backend", "vxlan", "backend: vxlan or host-gw")
	fs.BoolVar(&c.dualStack, "dual-stack", false, "IPv4 and IPv6: every node leases a subnet of each, every pod has an address of each, and both ping tables are shown")
	fs.IntVar(&c.nodes, "nodes", 3, "number of nodes")
	fs.IntVar(&c.pods, "pods", 2, "pods per node")
	fs.BoolVar(&c.keep, "keep", false, "leave the cluster running and print how to look around and tear it down")
	fs.BoolVar(&c.teardown, "teardown", false, "remove a cluster left running by --keep (needs --prefix)")
	fs.StringVar(&c.prefix, "prefix", "", "the cluster's name prefix (namespaces are <prefix>-ul, <prefix>-n1, ...); default: random")
	fs.StringVar(&c.dir, "dir", "", "directory for logs and state; default: a new one under $TMPDIR")
	fs.BoolVar(&c.verbose, "v", false, "print the harness's progress messages")
	fs.StringVar(&c.serveEtcd, "serve-etcd", "", "internal: serve the member of the cluster's etcd that this directory holds (how --keep outlives this process, and how tests stop and start members)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case c.serveEtcd != "":
	case c.teardown:
		if c.prefix == "" {
			return c, errors.New("--teardown needs --prefix")
		}
	default:
		if c.weftd == "" || c.cniBin == "" {
			return c, errors.New("--weftd and --cni-bin are required")
		}
		if c.backend != "vxlan" && c.backend != "host-gw" {
			return c, fmt.Errorf("--backend=%q: want vxlan or host-gw", c.backend)
		}
		if c.nodes < 1 || c.nodes > 20 || c.pods < 1 || c.pods > 10 {
			return c, fmt.Errorf("--nodes=%d --pods=%d: want 1..20 nodes and 1..10 pods per node", c.nodes, c.pods)
		}
	}
	return c, nil
}

func run(args []string, out io.Writer) error {
	cfg, err := parseFlags(args, out)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return errors.New("needs root: the cluster is made of network namespaces (sudo make demo)")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch {
	case cfg.serveEtcd != "":
		return cluster.ServeEtcd(ctx, cfg.serveEtcd)
	case cfg.teardown:
		if err := cluster.Teardown(cfg.prefix); err != nil {
			return err
		}
		fmt.Fprintf(out, "cluster %s removed\n", cfg.prefix)
		return nil
	}
	return demo(ctx, cfg, out)
}

// logger prints the harness's messages when asked to, and tells it whether the demo failed
// so that it keeps the logs then.
type logger struct {
	out     io.Writer
	verbose bool
	failed  atomic.Bool
}

func (l *logger) Logf(format string, args ...any) {
	if l.verbose || l.failed.Load() {
		fmt.Fprintf(l.out, "  "+format+"\n", args...)
	}
}

func (l *logger) Failed() bool { return l.failed.Load() }

func demo(ctx context.Context, cfg config, out io.Writer) (err error) {
	opts := cluster.Options{
		NetConf: fmt.Sprintf(`{"Network":"10.244.0.0/16","Backend":{"Type":%q}}`, cfg.backend),
		Weftd:   cfg.weftd,
		CNIBin:  cfg.cniBin,
		Prefix:  cfg.prefix,
		Dir:     cfg.dir,
		Keep:    cfg.keep,
	}
	family := "IPv4"
	if cfg.dualStack {
		opts.NetConf = fmt.Sprintf(`{"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"fd00:10:244::/56","Backend":{"Type":%q}}`, cfg.backend)
		family = "dual-stack"
	}
	if missing := cluster.MissingCNIPlugins(cfg.cniBin); len(missing) > 0 {
		return fmt.Errorf("--cni-bin=%s lacks %s (tools/install-cni.sh %s installs them)",
			cfg.cniBin, strings.Join(missing, ", "), cfg.cniBin)
	}
	if cfg.keep {
		// etcd must outlive this process: it runs as a second copy of this program.
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this program for the etcd process: %w", err)
		}
		opts.EtcdCommand = []string{self, "--serve-etcd"}
	}

	log := &logger{out: os.Stderr, verbose: cfg.verbose}
	fmt.Fprintf(out, "starting etcd and %d %s %s nodes in network namespaces...\n", cfg.nodes, family, cfg.backend)
	c, err := cluster.New(log, opts)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			log.failed.Store(true)
		}
		if cerr := c.Close(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		switch {
		case cfg.keep && err != nil && !errors.Is(err, pingsFailed{}):
			fmt.Fprintf(out, "the cluster %s is left running (--keep); remove it with --teardown --prefix %s\n",
				c.Prefix(), c.Prefix())
		case !cfg.keep && err == nil:
			fmt.Fprintln(out, "\ncluster torn down")
		}
	}()

	nodes := make([]*cluster.Node, 0, cfg.nodes)
	for i := 1; i <= cfg.nodes; i++ {
		n, err := c.AddNode(fmt.Sprintf("n%d", i))
		if err != nil {
			return err
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return errors.New("interrupted")
		}
	}
	if err := printLeases(out, c, nodes); err != nil {
		return err
	}

	var pods []*cluster.Pod
	for _, n := range nodes {
		for j := 0; j < cfg.pods; j++ {
			p, err := c.AddPod(n, string(rune('a'+j)))
			if err != nil {
				return err
			}
			pods = append(pods, p)
		}
	}
	if ctx.Err() != nil {
		return errors.New("interrupted")
	}
	allOK := pingTable(ctx, out, pods, "IPv4", func(p *cluster.Pod) netip.Addr { return p.IP })
	if cfg.dualStack {
		allOK = pingTable(ctx, out, pods, "IPv6", func(p *cluster.Pod) netip.Addr { return p.IP6 }) && allOK
	}

	if cfg.keep {
		printKeep(out, c, nodes, pods)
	}
	if !allOK {
		log.failed.Store(true)
		return pingsFailed{}
	}
	return nil
}

// printLeases prints each node's lease as etcd holds it.
func printLeases(out io.Writer, c *cluster.Cluster, nodes []*cluster.Node) error {
	leases, err := c.Leases()
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nleases in etcd (%s/subnets/):\n", c.EtcdPrefix())
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "  NODE\tNAMESPACE\tSUBNET\tPUBLIC IP\tBACKEND\tVTEP MAC")
	for _, n := range nodes {
		env, err := n.SubnetEnv()
		if err != nil {
			return err
		}
		sn, sn6 := env.LeaseSubnets()
		row := fmt.Sprintf("  %s\t%s\t%s\t", n.Name, n.NS, sn)
		found := false
		for _, l := range leases {
			if l.Subnet != sn || l.IPv6Subnet != sn6 {
				continue
			}
			found = true
			row += fmt.Sprintf("%s\t%s\t%s", l.Attrs.PublicIP, l.Attrs.BackendType, vtepMAC(l.Attrs.BackendData))
			if sn6.IsValid() { // the IPv6 half on a line of its own
				row += fmt.Sprintf("\n  \t\t%s\t%s\t\t%s", sn6, l.Attrs.PublicIPv6, vtepMAC(l.Attrs.BackendV6Data))
			}
		}
		if !found {
			row += "(no lease!)\t\t"
		}
		fmt.Fprintln(w, row)
	}
	return w.Flush()
}

// vtepMAC is the VtepMAC in vxlan backend data, or "-".
func vtepMAC(data json.RawMessage) string {
	var d struct{ VtepMAC string }
	if len(data) > 0 && json.Unmarshal(data, &d) == nil && d.VtepMAC != "" {
		return d.VtepMAC
	}
	return "-"
}

// pingTable pings from every pod to every other pod's address of one family (addr picks it)
// and prints the matrix; it reports whether every ping was answered.
func pingTable(ctx context.Context, out io.Writer, pods []*cluster.Pod, family string, addr func(*cluster.Pod) netip.Addr) bool {
	label := func(p *cluster.Pod) string { return p.Node.Name + "/" + p.Name }
	fmt.Fprintf(out, "\n%s pods:", family)
	for _, p := range pods {
		fmt.Fprintf(out, " %s=%s", label(p), addr(p))
	}
	fmt.Fprintf(out, "\n\n%s pings (%d each, row pings column):\n", family, pingCount)
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	header := "  FROM \\ TO"
	for _, p := range pods {
		header += "\t" + label(p)
	}
	fmt.Fprintln(w, header)
	allOK := true
	// One deadline for all pairs, so that a broken cluster fails in seconds, not minutes.
	converge := time.Now().Add(convergeTimeout)
	for _, from := range pods {
		row := "  " + label(from)
		for _, to := range pods {
			if from == to || ctx.Err() != nil {
				row += "\t-"
				continue
			}
			sent, recv := pingPair(from, addr(to), converge)
			if sent == pingCount && recv == sent {
				row += fmt.Sprintf("\tok %d/%d", recv, sent)
			} else {
				row += fmt.Sprintf("\tFAIL %d/%d", recv, sent)
				allOK = false
			}
		}
		fmt.Fprintln(w, row)
	}
	_ = w.Flush() // out is the terminal; nothing to do if it went away
	if ctx.Err() != nil {
		fmt.Fprintln(out, "interrupted")
		return false
	}
	if allOK {
		fmt.Fprintf(out, "\nevery pod reaches every other pod over %s\n", family)
	} else {
		fmt.Fprintf(out, "\nSOME %s PINGS FAILED\n", family)
	}
	return allOK
}

// pingPair waits, until the deadline at most, for the path to answer once (a node may still
// be learning of a peer that joined after it), then sends the counted pings. A ping that
// cannot run counts as none answered.
func pingPair(from *cluster.Pod, to netip.Addr, deadline time.Time) (sent, received int) {
	for time.Now().Before(deadline) {
		if _, recv, err := cluster.Ping(from, to, 1, pingInterval); err == nil && recv == 1 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	sent, received, err := cluster.Ping(from, to, pingCount, pingInterval)
	if err != nil {
		return pingCount, 0
	}
	return sent, received
}

// printKeep tells how to look around a kept cluster and how to remove it.
func printKeep(out io.Writer, c *cluster.Cluster, nodes []*cluster.Node, pods []*cluster.Pod) {
	n, from, to := nodes[0], pods[0], pods[len(pods)-1]
	self, err := os.Executable()
	if err != nil {
		self = "weft-demo"
	}
	fmt.Fprintf(out, "\nthe cluster %s keeps running; its files are in %s\nlook around (as root):\n", c.Prefix(), c.Dir())
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	for _, l := range [][2]string{
		{"ip netns list | grep " + c.Prefix() + "-", "the namespaces: underlay, nodes, pods"},
		{"ip netns exec " + n.NS + " ip route", "routes to the other nodes' pod subnets"},
		{"ip netns exec " + n.NS + " ip -d link show", "eth0, cni0, flannel.1 (vxlan)"},
		{"ip netns exec " + n.NS + " ip neigh show dev flannel.1", "vxlan: the peers' VTEP MACs"},
		{"ip netns exec " + n.NS + " bridge fdb show dev flannel.1", "vxlan: where each VTEP MAC lives"},
		{fmt.Sprintf("ip netns exec %s ping -c 3 %s", from.NS, to.IP), "pod " + from.Node.Name + "/" + from.Name + " to pod " + to.Node.Name + "/" + to.Name},
		{"cat " + n.SubnetFile, "what the CNI plugin reads"},
		{"less " + n.LogPath, "weftd's log"},
		{"ip netns exec " + c.Underlay() + " curl -s " + cluster.EtcdURL + "/version", "etcd, reachable from the underlay"},
	} {
		fmt.Fprintf(w, "  %s\t# %s\n", l[0], l[1])
	}
	_ = w.Flush() // out is the terminal; nothing to do if it went away
	fmt.Fprintf(out, "tear it down:\n  %s --teardown --prefix %s\n", self, c.Prefix())
}
