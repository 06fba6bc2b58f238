package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netns"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/e2e/cluster"
)

const (
	// envPoll is how often a starting daemon's subnet.env is looked for: the precision of
	// the subnet.env figure.
	envPoll = 2 * time.Millisecond
	// statusPoll is how often a run checks on its daemon when no route changes.
	statusPoll = 50 * time.Millisecond
	// logLines is how much of a failed daemon's log is logged.
	logLines = 20
)

// daemonRun is one run of a daemon on the node under test.
type daemonRun struct {
	b       *bench
	daemon  string
	node    *cluster.Node
	watch   *routeWatch
	started time.Time
}

// startDaemon resets the node, starts watching its routes, expecting want, and starts the
// daemon.
func (b *bench) startDaemon(daemon string, want map[netip.Prefix]struct{}) (*daemonRun, error) {
	if err := resetNode(b.node); err != nil {
		return nil, err
	}
	w, err := watchRoutes(b.node.NS, network(), b.log)
	if err != nil {
		return nil, err
	}
	w.Expect(want)
	r := &daemonRun{b: b, daemon: daemon, node: b.node, watch: w, started: time.Now()}
	if err := b.node.StartDaemon(b.argv(daemon, b.node)...); err != nil {
		w.Close()
		return nil, fmt.Errorf("starting %s: %w", daemon, err)
	}
	b.log.Debug("daemon started", "daemon", daemon, "peers", len(want), "pid", b.node.Pid())
	return r, nil
}

// argv is the command line of a daemon on node n: its binary and the harness's flags, then
// weftFlags if it is weftd.
func (b *bench) argv(daemon string, n *cluster.Node, weftFlags ...string) []string {
	if daemon == Flanneld {
		return append([]string{b.cfg.Flanneld}, n.FlanneldArgs()...)
	}
	return slices.Concat([]string{b.cfg.Weftd}, n.WeftdArgs(), weftFlags)
}

// resetNode brings the node back to the state of a node that never ran a daemon: no
// subnet.env, no overlay device (its routes, neighbours and FDB entries go with it), no
// nexthop objects, no firewall rules, no route inside the cluster network.
func resetNode(n *cluster.Node) error {
	if err := os.Remove(n.SubnetFile); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resetting node %s: %w", n.Name, err)
	}
	// The routes go first: the kernel deletes a device's nexthop objects one by one and walks
	// every route for each, which at 65,000 routes through them took 42 s (linux.Plane.drain).
	if err := deleteRoutes(n); err != nil {
		return fmt.Errorf("resetting node %s: %w", n.Name, err)
	}
	// Either may be missing (an old kernel, no nft): then there is nothing of theirs either.
	_, _ = n.Exec("ip", "nexthop", "flush")
	_, _ = n.Exec("nft", "flush", "ruleset")
	if _, err := n.Exec("ip", "link", "show", backend.VXLANDeviceName(vni)); err == nil {
		if _, err := n.Exec("ip", "link", "del", backend.VXLANDeviceName(vni)); err != nil {
			return fmt.Errorf("resetting node %s: %w", n.Name, err)
		}
	}
	if _, err := n.Exec("ip", "route", "flush", "root", network().String()); err != nil {
		return fmt.Errorf("resetting node %s: %w", n.Name, err)
	}
	left, err := countRoutes(n.NS)
	if err != nil {
		return fmt.Errorf("resetting node %s: %w", n.Name, err)
	}
	if left > 0 {
		return fmt.Errorf("resetting node %s: %d routes inside %s are left", n.Name, left, network())
	}
	return nil
}

// countRoutes counts the routes of a namespace that a routeWatch would count.
func countRoutes(nsName string) (int, error) {
	h, err := netns.GetFromName(nsName)
	if err != nil {
		return 0, fmt.Errorf("opening network namespace %s: %w", nsName, err)
	}
	defer h.Close()
	routes, err := listRoutes(h)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range routes {
		if _, ok := clusterRoute(network(), r); ok {
			n++
		}
	}
	return n, nil
}

// coldStart is what a cold start measures.
type coldStart struct {
	env, first, all, rss Value
	// peak is the most RSS the daemon had (VmHWM), by the time rss is read.
	peak Value
	ok   bool // every route was seen
}

// coldStart waits until the daemon has written subnet.env and programmed every expected
// route, then for the settling time, and reads its RSS.
func (r *daemonRun) coldStart(ctx context.Context) coldStart {
	var res coldStart
	deadline := r.started.Add(r.b.cfg.StartTimeout)
	var envAt time.Time
	timer := time.NewTimer(envPoll)
	defer timer.Stop()
	for {
		if envAt.IsZero() {
			if _, err := os.Stat(r.node.SubnetFile); err == nil {
				envAt = time.Now()
			}
		}
		st := r.watch.Status()
		now := time.Now()
		switch {
		case st.err != nil:
			return r.failed(res, "route watch: %v", st.err)
		case !r.node.Running():
			return r.failed(res, "%s exited: %v", r.daemon, r.node.ExitState())
		case !envAt.IsZero() && !st.all.IsZero():
			res.env, res.first, res.all = seconds(envAt.Sub(r.started)), seconds(st.first.Sub(r.started)), seconds(st.all.Sub(r.started))
			res.ok = true
		case now.After(deadline) || ctx.Err() != nil:
			r.b.log.Warn("cold start incomplete", "daemon", r.daemon, "routes", st.have, "of", st.want,
				"subnet.env", !envAt.IsZero(), "after", r.b.cfg.StartTimeout)
			res.env, res.first, res.all = r.since(envAt), r.since(st.first), timedOut(now.Sub(r.started))
			r.b.fail("%s: cold start with %d peers: %d routes of %d after %v", r.daemon, st.want, st.have, st.want,
				now.Sub(r.started).Round(time.Millisecond))
		}
		if res.ok || res.all.AtLeast {
			break
		}
		poll := statusPoll
		if envAt.IsZero() {
			poll = envPoll
		}
		timer.Reset(poll)
		select {
		case <-r.watch.Changed():
		case <-timer.C:
		}
	}
	if st := r.watch.Status(); st.resyncs > 0 {
		r.b.log.Warn("route subscription overflowed; routes seen by a dump are dated late", "daemon", r.daemon, "times", st.resyncs)
	}
	select {
	case <-time.After(r.b.cfg.Settle):
	case <-ctx.Done():
	}
	mem, err := cluster.ReadMemory(r.node.Pid())
	if err != nil {
		res.rss, res.peak = missing("%v", err), missing("%v", err)
	} else {
		res.rss, res.peak = Value{N: float64(mem.RSS)}, Value{N: float64(mem.Peak)}
	}
	r.b.log.Info("cold start", "daemon", r.daemon, "peers", r.watch.Status().want, "subnet.env", res.env.Format(Duration),
		"first", res.first.Format(Duration), "all", res.all.Format(Duration), "rss", res.rss.Format(Memory),
		"peak", res.peak.Format(Memory))
	return res
}

// since is the time from the start to t, missing when t is zero.
func (r *daemonRun) since(t time.Time) Value {
	if t.IsZero() {
		return missing("not seen")
	}
	return seconds(t.Sub(r.started))
}

// failed records a run that cannot be measured and logs the end of the daemon's log.
func (r *daemonRun) failed(res coldStart, format string, args ...any) coldStart {
	msg := fmt.Sprintf(format, args...)
	r.b.fail("%s: %s", r.daemon, msg)
	r.b.log.Error("daemon run failed", "daemon", r.daemon, "error", msg, "log", r.node.LogPath,
		"tail", r.node.LogTail(logLines))
	v := missing("failed")
	res.env, res.first, res.all, res.rss, res.peak = v, v, v, v, v
	return res
}

// stop ends the run: SIGTERM to the daemon, and the route watch.
func (r *daemonRun) stop() {
	if r.node.Running() {
		if _, err := r.node.Stop(syscall.SIGTERM); err != nil {
			r.b.log.Warn("stopping the daemon", "daemon", r.daemon, "error", err)
		}
	}
	r.watch.Close()
}

const (
	// kubeStormMax bounds the Node update storm: that many label changes at most.
	kubeStormMax = 5000
	// stormSettle is how long after the storm's last patch the daemon is given to take
	// the watch's events in; the CPU it spends idle over as long is taken off.
	stormSettle = 2 * time.Second
)

// nodeStorm changes a label on the peers' Nodes 1..k as fast as the API server takes the
// patches (no lease changes: what kubelets and controllers write all day) and returns the
// daemon's CPU time per patch: from the first patch until stormSettle after the last, less
// its idle CPU over as long, measured just before.
func (r *daemonRun) nodeStorm(ctx context.Context, peers *kubePeers, k int) Value {
	pid := r.node.Pid()
	idle0, err := cpuTime(pid)
	if err != nil {
		return missing("%v", err)
	}
	idle1, err := cpuTimeAfter(ctx, pid, stormSettle)
	if err != nil {
		return missing("%v", err)
	}
	idle := float64(idle1-idle0) / float64(stormSettle)
	start := time.Now()
	if err := peers.touch(ctx, 1, k); err != nil {
		r.b.fail("%s: Node update storm: %v", r.daemon, err)
		return missing("failed")
	}
	patched := time.Since(start)
	used, err := cpuTimeAfter(ctx, pid, stormSettle)
	if err != nil {
		return missing("%v", err)
	}
	elapsed := time.Since(start)
	busy := time.Duration(float64(used-idle1) - idle*float64(elapsed))
	per := max(busy, 0) / time.Duration(k)
	r.b.log.Info("Node update storm", "daemon", r.daemon, "patches", k, "took", patched.Round(time.Millisecond),
		"cpu", busy.Round(time.Millisecond), "per_update", per, "idle_cpu_per_s", time.Duration(idle*float64(time.Second)))
	return seconds(per)
}

// cpuTimeAfter is cpuTime once d has passed, unless ctx is done first.
func cpuTimeAfter(ctx context.Context, pid int, d time.Duration) (time.Duration, error) {
	select {
	case <-time.After(d):
		return cpuTime(pid)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// cpuTime is the CPU time the process pid has used so far, summed over its threads from
// their schedstat in nanoseconds (the utime and stime of /proc/<pid>/stat count 10 ms
// ticks, too coarse for a storm of cheap events).
func cpuTime(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, fmt.Errorf("CPU time of pid %d: %w", pid, err)
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread ended meanwhile
		}
		var ns int64
		if _, err := fmt.Sscan(string(b), &ns); err != nil {
			return 0, fmt.Errorf("CPU time of pid %d: %s/schedstat %q: %w", pid, t.Name(), b, err)
		}
		sum += time.Duration(ns)
	}
	return sum, nil
}

// deleteRoutes deletes node n's IPv4 routes inside the cluster network by their prefixes, in
// one `ip -batch`: `ip route flush` sends each route back as dumped, which the kernel refuses
// (EINVAL) for a route through a nexthop object.
func deleteRoutes(n *cluster.Node) error {
	out, err := n.Exec("ip", "-4", "route", "show", "root", network().String())
	if err != nil {
		return err
	}
	var batch strings.Builder
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case slices.Contains([]string{"blackhole", "unreachable", "prohibit", "throw"}, f[0]) && len(f) > 1:
			fmt.Fprintf(&batch, "route del %s %s\n", f[0], f[1])
		default:
			fmt.Fprintf(&batch, "route del %s\n", f[0])
		}
	}
	if batch.Len() == 0 {
		return nil
	}
	file, err := os.CreateTemp("", "weft-bench-routes-*.batch")
	if err != nil {
		return err
	}
	defer os.Remove(file.Name())
	_, err = file.WriteString(batch.String())
	if err = errors.Join(err, file.Close()); err != nil {
		return fmt.Errorf("writing the routes' deletions: %w", err)
	}
	// -force: a route gone meanwhile does not stop the rest.
	_, err = n.Exec("ip", "-force", "-batch", file.Name())
	return err
}
