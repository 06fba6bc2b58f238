package perf

import (
	"context"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"github.com/safchain/ethtool"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/e2e/cluster"
)

const (
	// streamTimeout bounds one throughput stream: the default 2 GiB at about 150 Mbit/s.
	streamTimeout = 2 * time.Minute
	// pathPoll is how often a ping looks for the path between the pods.
	pathPoll = 100 * time.Millisecond
	// txChecksumFeature is the transmit checksum offload a VXLAN device lets change (see
	// package linux's txChecksumFeatures): what `ethtool -K flannel.1 tx off` switches.
	txChecksumFeature = "tx-checksum-ip-generic"
	// offloadOff is weftd's flag that turns the offload off at start.
	offloadOff = "--vxlan-tx-checksum-offload=off"
)

// runThroughput measures the throughput figures of each daemon, in a cluster of its own.
func (b *bench) runThroughput(ctx context.Context) error {
	for _, d := range b.daemonOrder() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.throughput(ctx, d); err != nil {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	for i, d := range b.daemonOrder() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// The pods on one node take the bridge alone, whatever the daemon: measured once.
		if err := b.hostGWThroughput(ctx, d, i == 0); err != nil {
			return fmt.Errorf("%s: host-gw: %w", d, err)
		}
	}
	for _, d := range b.daemonOrder() {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err := b.wireGuardThroughput(ctx, d); err != nil {
			return fmt.Errorf("%s: WireGuard: %w", d, err)
		}
	}
	return nil
}

// hostGWNetConf is NetConf on the host-gw backend: the pods' packets cross the underlay as
// they are, the ceiling an overlay is measured against.
const hostGWNetConf = `{"Network":"10.0.0.0/8","SubnetLen":24,"SubnetMin":"10.255.252.0","SubnetMax":"10.255.255.0",` +
	`"Backend":{"Type":"host-gw"}}`

// hostGWThroughput measures TCP from a pod on one node to a pod on the other over host-gw,
// Reps streams, and VXLAN's rate (offload on) as a fraction of it; with sameNode also from
// that pod to a second pod on its own node, through the bridge alone.
func (b *bench) hostGWThroughput(ctx context.Context, daemon string, sameNode bool) error {
	n := b.cfg.ThroughputBytes
	fig := figTputHostGW(n)
	c, r, err := b.tputCluster(daemon, hostGWNetConf, "throughput-hostgw-"+daemon)
	if err != nil {
		return err
	}
	defer b.closeCluster(c)
	err = r.streams(ctx, c, fig, "host-gw")
	if err == nil {
		err = r.manyAndSmall(ctx, figTputHostGWParallel(n), figRRHostGW(), "host-gw")
	}
	if err != nil {
		b.fail("%s: host-gw throughput: %v", daemon, err)
		for _, f := range []figure{fig, figTputHostGWParallel(n), figRRHostGW()} {
			if !b.figs.has(f, daemon) {
				b.figs.add(f, daemon, missing("failed"))
			}
		}
		return nil
	}
	b.figs.add(figTputOverHostGW(n), daemon, factor(b.figs.median(figTputOn(n), daemon), b.figs.median(fig, daemon)))
	if !sameNode {
		return nil
	}
	local := figTputSameNode(n)
	peer, err := c.AddPod(r.nodes[0], "pod2")
	if err == nil {
		err = r.stream(ctx, r.pods[0], peer, local, "one node")
	}
	if err != nil {
		b.fail("pods on one node: throughput: %v", err)
		for _, d := range b.cfg.Daemons() {
			if !b.figs.has(local, d) {
				b.figs.add(local, d, missing("failed"))
			}
		}
	}
	return nil
}

// tputCluster makes the two-node cluster of a throughput run of daemon on the network config
// netConf, its files in the directory named dir; the caller closes it (closeCluster).
func (b *bench) tputCluster(daemon, netConf, dir string) (*cluster.Cluster, *tputRun, error) {
	c, err := cluster.New(clusterLog{b}, cluster.Options{NetConf: netConf, CNIBin: b.cfg.CNIBin, Dir: b.clusterDir(dir)})
	if err != nil {
		return nil, nil, err
	}
	r := &tputRun{b: b, daemon: daemon}
	for i, name := range []string{"tput1", "tput2"} {
		if r.nodes[i], err = c.AddNode(name); err != nil {
			b.closeCluster(c)
			return nil, nil, err
		}
	}
	return c, r, nil
}

// wireGuardNetConf is NetConf on the wireguard backend.
const wireGuardNetConf = `{"Network":"10.0.0.0/8","SubnetLen":24,"SubnetMin":"10.255.252.0","SubnetMax":"10.255.255.0",` +
	`"Backend":{"Type":"wireguard"}}`

// wireGuardThroughput measures TCP from a pod on one node to a pod on the other through
// WireGuard, Reps streams, beside VXLAN's figures. flanneld's wireguard backend needs the
// kernel's WireGuard; where the kernel has none its figure says so. weftd runs the kernel's
// device where there is one, else its own in user space, as its /status says.
func (b *bench) wireGuardThroughput(ctx context.Context, daemon string) error {
	fig := figTputWireGuard(b.cfg.ThroughputBytes)
	if daemon == Flanneld && !kernelWireGuard() {
		b.figs.add(fig, daemon, missing("no WireGuard in this kernel"))
		return nil
	}
	c, r, err := b.tputCluster(daemon, wireGuardNetConf, "throughput-wireguard-"+daemon)
	if err != nil {
		return err
	}
	defer b.closeCluster(c)
	if err := r.streams(ctx, c, fig, "WireGuard"); err != nil {
		b.fail("%s: WireGuard throughput: %v", daemon, err)
		if !b.figs.has(fig, daemon) {
			b.figs.add(fig, daemon, missing("failed"))
		}
	}
	return nil
}

// streams starts the daemons, makes the pods and records Reps streams' rates under fig; path
// names the path in the log.
func (r *tputRun) streams(ctx context.Context, c *cluster.Cluster, fig figure, path string) error {
	if err := r.start(); err != nil {
		return err
	}
	var err error
	for i, node := range r.nodes {
		if r.pods[i], err = c.AddPod(node, "pod"); err != nil {
			return err
		}
	}
	if err := r.waitPath(ctx); err != nil {
		return err
	}
	return r.stream(ctx, r.pods[0], r.pods[1], fig, path)
}

// manyAndSmall records, Reps times, what one stream between the run's pods does not show:
// parallelStreams streams at once (many), and the mean round trip of one-byte requests and
// responses on one connection (small).
func (r *tputRun) manyAndSmall(ctx context.Context, many, small figure, path string) error {
	for range r.b.cfg.Reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := cluster.ParallelThroughput(r.pods[0], r.pods[1], parallelStreams, r.b.cfg.ThroughputBytes, streamTimeout)
		if err != nil {
			return err
		}
		v := Value{N: res.Mbps() * 1e6}
		r.b.figs.add(many, r.daemon, v)
		rtt, err := cluster.RequestResponse(r.pods[0], r.pods[1], roundTrips, streamTimeout)
		if err != nil {
			return err
		}
		r.b.figs.add(small, r.daemon, seconds(rtt))
		r.b.log.Info("pod-to-pod TCP, many streams and small requests", "path", path, "daemon", r.daemon,
			"streams", parallelStreams, "rate", v.Format(Rate), "round_trip", rtt)
	}
	return nil
}

// stream records Reps streams' rates from one pod to another under fig (a shared figure's
// for every daemon); path names the path in the log.
func (r *tputRun) stream(ctx context.Context, from, to *cluster.Pod, fig figure, path string) error {
	daemons := []string{r.daemon}
	if fig.shared {
		daemons = r.b.cfg.Daemons()
	}
	for range r.b.cfg.Reps {
		if err := ctx.Err(); err != nil {
			return err
		}
		res, err := cluster.Throughput(from, to, r.b.cfg.ThroughputBytes, streamTimeout)
		if err != nil {
			return err
		}
		v := Value{N: res.Mbps() * 1e6}
		r.b.log.Info("pod-to-pod TCP", "path", path, "daemon", r.daemon, "bytes", res.Bytes,
			"took", res.Elapsed.Round(time.Millisecond), "rate", v.Format(Rate))
		for _, d := range daemons {
			r.b.figs.add(fig, d, v)
		}
	}
	return nil
}

// kernelWireGuard reports whether this kernel makes WireGuard devices: it makes one, in a
// network namespace of its own, and deletes it.
func kernelWireGuard() bool {
	const ns = "weft-bench-wgprobe"
	if exec.Command("ip", "netns", "add", ns).Run() != nil {
		return false
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	return exec.Command("ip", "-n", ns, "link", "add", "wgprobe", "type", "wireguard").Run() == nil
}

// tputRun is a daemon's throughput measurement: two nodes running it, a pod on each.
type tputRun struct {
	b      *bench
	daemon string
	nodes  [2]*cluster.Node
	pods   [2]*cluster.Pod
}

// throughput measures TCP from a pod on one node to a pod on the other, over the daemon's
// VXLAN: Reps streams with the transmit checksum offload as the daemon leaves it (on), Reps
// with it off on both nodes (weftd started with --vxlan-tx-checksum-offload=off; flanneld,
// which has no such flag, with the offload switched off under it through the same ioctl),
// and the ratio of the two medians. A daemon that fails leaves its figures missing.
func (b *bench) throughput(ctx context.Context, daemon string) error {
	c, r, err := b.tputCluster(daemon, NetConf, "throughput-"+daemon)
	if err != nil {
		return err
	}
	defer b.closeCluster(c)
	n := b.cfg.ThroughputBytes
	on, off, err := r.run(ctx, c)
	b.figs.add(figTputFactor(n), daemon, factor(on, off))
	if err != nil {
		b.fail("%s: throughput: %v", daemon, err)
		for _, fig := range []figure{figTputOn(n), figTputOff(n), figTputVXLANParallel(n), figRRVXLAN()} {
			if !b.figs.has(fig, daemon) {
				b.figs.add(fig, daemon, missing("failed"))
			}
		}
	}
	return nil
}

// run starts the daemons, makes the pods and measures with the offload on, then off; it
// returns the medians, a figure it could not measure missing.
func (r *tputRun) run(ctx context.Context, c *cluster.Cluster) (on, off Value, err error) {
	on, off = missing("failed"), missing("failed")
	n := r.b.cfg.ThroughputBytes
	if err := r.start(); err != nil {
		return on, off, err
	}
	for i, node := range r.nodes {
		if r.pods[i], err = c.AddPod(node, "pod"); err != nil {
			return on, off, err
		}
	}
	if err := r.waitPath(ctx); err != nil {
		return on, off, err
	}
	if on, err = r.measure(ctx, figTputOn(n), true); err != nil {
		return on, off, err
	}
	if err := r.manyAndSmall(ctx, figTputVXLANParallel(n), figRRVXLAN(), "VXLAN"); err != nil {
		return on, off, err
	}
	if err := r.switchOff(ctx); err != nil {
		return on, off, err
	}
	off, err = r.measure(ctx, figTputOff(n), false)
	return on, off, err
}

// measure checks that the offload is on (or off) on both nodes, streams Reps times and
// records each stream's rate under fig. It returns the median, missing after an error.
func (r *tputRun) measure(ctx context.Context, fig figure, on bool) (Value, error) {
	for _, node := range r.nodes {
		got, err := txChecksumOffload(node)
		if err != nil {
			return missing("failed"), err
		}
		if got != on {
			return missing("failed"), fmt.Errorf("node %s: %s %s, want %s", node.Name, txChecksumFeature, onOff(got), onOff(on))
		}
	}
	var samples []Value
	for range r.b.cfg.Reps {
		if err := ctx.Err(); err != nil {
			return missing("failed"), err
		}
		res, err := cluster.Throughput(r.pods[0], r.pods[1], r.b.cfg.ThroughputBytes, streamTimeout)
		if err != nil {
			return missing("failed"), err
		}
		v := Value{N: res.Mbps() * 1e6}
		r.b.log.Info("pod-to-pod TCP", "daemon", r.daemon, "offload", onOff(on), "bytes", res.Bytes,
			"took", res.Elapsed.Round(time.Millisecond), "rate", v.Format(Rate))
		r.b.figs.add(fig, r.daemon, v)
		samples = append(samples, v)
	}
	return median(samples), nil
}

// start starts the daemon on both nodes, weftd with weftFlags, and waits until each is ready.
//
// The nodes start one after the other: two flanneld that start together may pick the same
// subnet of the throughput network's four, and the one that loses exits ("subnet already
// exists") where weftd picks another.
func (r *tputRun) start(weftFlags ...string) error {
	for _, node := range r.nodes {
		if err := node.StartDaemon(r.b.argv(r.daemon, node, weftFlags...)...); err != nil {
			return fmt.Errorf("starting %s: %w", r.daemon, err)
		}
		if err := node.WaitReady(r.b.cfg.StartTimeout); err != nil {
			return err
		}
	}
	return nil
}

// switchOff turns the offload off on both nodes: weftd is started again with
// --vxlan-tx-checksum-offload=off (it adopts its device, the pods keep their addresses);
// flanneld's devices are switched under it.
func (r *tputRun) switchOff(ctx context.Context) error {
	if r.daemon == Flanneld {
		for _, node := range r.nodes {
			if err := setTxChecksumOffload(node, false); err != nil {
				return err
			}
		}
		return nil
	}
	for _, node := range r.nodes {
		if _, err := node.Stop(syscall.SIGTERM); err != nil {
			return fmt.Errorf("node %s: stopping %s: %w", node.Name, r.daemon, err)
		}
	}
	if err := r.start(offloadOff); err != nil {
		return err
	}
	return r.waitPath(ctx)
}

// waitPath waits until the second pod answers a ping from the first: both daemons have
// programmed the other's subnet.
func (r *tputRun) waitPath(ctx context.Context) error {
	from, to := r.pods[0], r.pods[1]
	deadline := time.Now().Add(r.b.cfg.StartTimeout)
	for {
		_, received, err := cluster.Ping(from, to.IP, 1, pathPoll)
		switch {
		case err != nil:
			return err
		case received == 1:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("pod %s does not answer pod %s's pings after %v", to.Name, from.Name, r.b.cfg.StartTimeout)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		time.Sleep(pathPoll)
	}
}

// factor is the ratio of two rates, missing unless both were measured.
func factor(on, off Value) Value {
	if on.Missing != "" || off.Missing != "" || off.N <= 0 {
		return missing("no rates")
	}
	return Value{N: on.N / off.N}
}

// withEthtool runs fn with an ethtool handle (a socket made inside the node's namespace, so
// it sees the node's devices).
func withEthtool(n *cluster.Node, fn func(et *ethtool.Ethtool) error) error {
	return n.Do(func() error {
		et, err := ethtool.NewEthtool()
		if err != nil {
			return fmt.Errorf("node %s: opening the ethtool socket: %w", n.Name, err)
		}
		defer et.Close()
		return fn(et)
	})
}

// txChecksumOffload reads whether the node's VXLAN device offloads transmit checksums.
func txChecksumOffload(n *cluster.Node) (bool, error) {
	dev := backend.VXLANDeviceName(vni)
	var on bool
	err := withEthtool(n, func(et *ethtool.Ethtool) error {
		fs, err := et.Features(dev)
		if err != nil {
			return fmt.Errorf("node %s: reading the features of %s: %w", n.Name, dev, err)
		}
		on = fs[txChecksumFeature]
		return nil
	})
	return on, err
}

// setTxChecksumOffload switches the node's VXLAN device's transmit checksum offload, as
// `ethtool -K flannel.1 tx off` does.
func setTxChecksumOffload(n *cluster.Node, on bool) error {
	dev := backend.VXLANDeviceName(vni)
	return withEthtool(n, func(et *ethtool.Ethtool) error {
		if err := et.Change(dev, map[string]bool{txChecksumFeature: on}); err != nil {
			return fmt.Errorf("node %s: switching %s of %s %s: %w", n.Name, txChecksumFeature, dev, onOff(on), err)
		}
		return nil
	})
}

// onOff writes a switch's state.
func onOff(on bool) string {
	if on {
		return "on"
	}
	return "off"
}
