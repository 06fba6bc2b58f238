package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/subnet"
)

// Logger receives the soak's progress; a *testing.T fits.
type Logger interface {
	Logf(format string, args ...any)
}

// Config describes a soak.
type Config struct {
	Seed     uint64
	Duration time.Duration // the busy time in all
	Phase    time.Duration // a phase's length; 0: Duration (one phase)
	Nodes    int           // weftd nodes; default 4
	Backend  string        // "vxlan" (default) or "host-gw"
	// Datastore is Etcd (default: three members) or Kube: weftd --kube-subnet-mgr against a
	// kube-apiserver in the underlay on a sole etcd member, the leases the Node objects'
	// annotations.
	Datastore string
	// DualStack runs an IPv6 network beside the IPv4 one: every lease has both subnets,
	// pods both addresses, and pings, leases and kernel state are checked in both.
	DualStack bool

	Weftd       string   // the weftd binary
	CNIBin      string   // the CNI plugins' directory
	EtcdCommand []string // runs an etcd member (cluster.Options.EtcdCommand)

	// Settle is how long a node stays touched after a fault touching it ends: weftd
	// starting again, repairing what was deleted, its peers learning a new VTEP MAC.
	// Default 5 s.
	Settle time.Duration
	// Converge bounds how long the cluster may take to converge after a phase. Default 60 s.
	Converge time.Duration
}

// Report is what a soak did and found.
type Report struct {
	Schedule Schedule
	// Injected counts the faults injected, by kind; Skipped those that could not be (the
	// leader unknown, no route to delete), by kind.
	Injected, Skipped map[Kind]int
	// Checks counts the invariant checks made, by invariant.
	Checks map[string]int
	// Violations are the invariants broken, each with the seed and the faults in force.
	Violations []string
	// Problems are the harness's own failures (a fault it could not inject or end).
	Problems []string
	// Pings: runs of ping between pods on different nodes, the requests sent and lost in
	// runs that no fault touched, and in runs that one did (not held against weft).
	PingRuns, PingsSent, PingsLost, TouchedSent, TouchedLost int
	// TouchedLostBy counts the requests lost in touched runs by the kinds of fault that
	// touched them.
	TouchedLostBy map[string]int
	// Peak resources seen over all weftd runs: RSS in bytes, goroutines, file descriptors.
	PeakRSS                 int64
	PeakGoroutines, PeakFDs int
	BaseGoroutines, BaseFDs int
	BaseRSS                 int64
	History                 []string // every fault as it ran, with its times
	// Stalls are the times the kernel's network configuration stalled (a netlink request
	// of the harness took over stallAfter): the machine's, not weft's (on a shared
	// machine, another's network namespaces being destroyed hold the kernel's locks).
	// Violations in or near one say so.
	Stalls                      []string
	Elapsed                     time.Duration
	DatastoreUnreachableSamples int
	MACChanges                  int
	// Writes to the datastore: leases (etcd) or Node objects (Kubernetes) of the churn and
	// of the hostile writer, and a node's own annotations overwritten.
	ChurnWrites, HostileWrite, TamperWrites int
	Compactions                             int
}

// Summary is the report in a few lines.
func (r Report) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d: %v, %d phases\n", r.Schedule.Seed, r.Elapsed.Round(time.Second), len(r.Schedule.Phases))
	fmt.Fprintf(&b, "faults injected: %s (skipped: %s)\n", counts(r.Injected), counts(r.Skipped))
	fmt.Fprintf(&b, "invariant checks: %s\n", counts(r.Checks))
	fmt.Fprintf(&b, "pings: %d runs; untouched %d sent, %d lost; touched by a fault %d sent, %d lost\n",
		r.PingRuns, r.PingsSent, r.PingsLost, r.TouchedSent, r.TouchedLost)
	fmt.Fprintf(&b, "lost in touched runs, by the faults touching them: %s\n", counts(r.TouchedLostBy))
	fmt.Fprintf(&b, "weftd peaks: RSS %d MiB (%d at the start), goroutines %d (%d), fds %d (%d); VTEP MAC changes (allowed: a device deleted with weftd down or starting, a MAC claimed by another lease): %d\n",
		r.PeakRSS>>20, r.BaseRSS>>20, r.PeakGoroutines, r.BaseGoroutines, r.PeakFDs, r.BaseFDs, r.MACChanges)
	fmt.Fprintf(&b, "datastore writes: churn %d, hostile %d, a node's own annotations tampered with %d; etcd compactions %d; samples with the datastore unreachable: %d\n",
		r.ChurnWrites, r.HostileWrite, r.TamperWrites, r.Compactions, r.DatastoreUnreachableSamples)
	fmt.Fprintf(&b, "netlink stalls of the machine: %d %v\n", len(r.Stalls), r.Stalls)
	fmt.Fprintf(&b, "violations: %d, harness problems: %d", len(r.Violations), len(r.Problems))
	return b.String()
}

func counts[K ~string](m map[K]int) string {
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, 0, len(keys))
	total := 0
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		total += m[k]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}

const (
	network      = "10.244.0.0/16"
	network6     = "fd00:10:244::/56"
	vxlanDevice  = "flannel.1"
	vxlan6Device = "flannel-v6.1" // flannel's name for the IPv6 device of VNI 1
	readyTimeout = 60 * time.Second
	sampleEvery  = 2 * time.Second
	pingCount    = 20
	pingInterval = 50 * time.Millisecond
	// stallAfter: a netlink request taking longer says the kernel's network
	// configuration is stalled; stallNear is how long after one a violation is flagged.
	stallAfter, stallNear = 2 * time.Second, 30 * time.Second
	etcdTimeout           = 2 * time.Second
	churnSubnets          = 8
	hostileSubset         = 8
	// datastoreTimeout is weftd's --datastore-timeout: a node cut from etcd for longer
	// must say so on /readyz (probes every 2 s, so within about 2 s + 4 s more).
	datastoreTimeout = 4 * time.Second
	cutReadyzAfter   = 9 * time.Second
	// underlayMTU is the nodes' eth0 MTU, which MTUChange lowers and puts back.
	underlayMTU = 1500
)

// Run builds the cluster, runs the schedule the seed draws with pods pinging across every
// pair of nodes, checks the invariants all along, and returns what it saw. An error means the
// soak could not run (the cluster would not start); broken invariants are in the report.
func Run(log Logger, cfg Config) (Report, error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 4
	}
	if cfg.Backend == "" {
		cfg.Backend = "vxlan"
	}
	if cfg.Settle == 0 {
		cfg.Settle = 5 * time.Second
	}
	if cfg.Converge == 0 {
		cfg.Converge = 60 * time.Second
	}
	if cfg.Datastore == "" {
		cfg.Datastore = Etcd
	}
	kinds := Kinds(cfg.Datastore)
	if kinds == nil {
		return Report{}, fmt.Errorf("soak: datastore %q: want %s or %s", cfg.Datastore, Etcd, Kube)
	}
	if cfg.Backend != "vxlan" {
		kinds = slices.DeleteFunc(kinds, func(k Kind) bool { return k == VXLANDelete })
	}
	// Kubernetes mode's etcd serves the API server alone: one member.
	members := 3
	if cfg.Datastore == Kube {
		members = 1
	}
	sched, err := Plan(cfg.Seed, PlanConfig{Duration: cfg.Duration, Phase: cfg.Phase, Nodes: cfg.Nodes, Members: members, Kinds: kinds})
	if err != nil {
		return Report{}, err
	}
	stack := "IPv4"
	if cfg.DualStack {
		stack = "dual-stack"
	}
	log.Logf("soak: seed %d (replay with SEED=%d), %v on %d %s %s nodes, datastore %s on %d etcd member(s); the schedule:\n%s",
		cfg.Seed, cfg.Seed, cfg.Duration, cfg.Nodes, stack, cfg.Backend, cfg.Datastore, members, sched)

	netConf := fmt.Sprintf(`{"Network":%q,"Backend":{"Type":%q}}`, network, cfg.Backend)
	if cfg.DualStack {
		netConf = fmt.Sprintf(`{"Network":%q,"EnableIPv6":true,"IPv6Network":%q,"Backend":{"Type":%q}}`, network, network6, cfg.Backend)
	}
	r := &runner{log: log, cfg: cfg, sched: sched,
		rep: Report{Schedule: sched, Injected: map[Kind]int{}, Skipped: map[Kind]int{}, Checks: map[string]int{},
			TouchedLostBy: map[string]int{}}}
	opts := cluster.Options{
		NetConf: netConf, Weftd: cfg.Weftd, CNIBin: cfg.CNIBin,
		EtcdCommand: cfg.EtcdCommand, EtcdMembers: members,
		WeftdArgs: []string{"--datastore-timeout=" + datastoreTimeout.String()},
	}
	if cfg.Datastore == Kube {
		opts.Kube = &cluster.KubeOptions{Kubeconfig: r.kubeconfig}
	}
	if r.c, err = cluster.New(log, opts); err != nil {
		return Report{}, err
	}
	if cfg.Datastore == Kube {
		if err := r.startAPIServer(); err != nil {
			return Report{}, err
		}
		// Before the cluster goes: the API server runs in its underlay.
		defer r.srv.Close()
	}
	if err := r.setUp(); err != nil {
		return r.rep, err
	}
	r.run()
	return r.rep, nil
}

// runner is one soak under way.
type runner struct {
	log      Logger
	cfg      Config
	c        *cluster.Cluster
	kubeMode // Kubernetes mode's API server and client
	sched    Schedule
	nodes    []*cluster.Node
	pods     []*cluster.Pod
	start    time.Time

	// What each node must keep while it lives.
	subnets []netip.Prefix
	macs    []string
	churn   []netip.Prefix
	hostile []netip.Prefix
	// The IPv6 halves, in a dual-stack network.
	subnets6 []netip.Prefix
	macs6    []string
	churn6   []netip.Prefix

	mu      sync.Mutex
	rep     Report
	running map[int]*record // the faults in force, by ID
	done    []*record
	// newMAC: the node's device was deleted while its weftd was not there to make it
	// again with the lease's MAC (stopped, or starting); the next weftd makes it with a new
	// one, which the lease then publishes, once.
	newMAC, newMAC6 []bool
	// nodeMu orders a node's device deletions and weftd stops and starts, so that each
	// knows whether the other came first.
	nodeMu []sync.Mutex
	// exited is the exit status of each node's weftd last seen by checkAlive.
	exited []*os.ProcessState
	// tampered: the node's own annotations were overwritten (AnnotationTamper) and have not
	// been seen written back yet: its lease is not held against it meanwhile.
	tampered []bool
	// locks are the resources the faults hold at run time: a fault that ends late (an etcd
	// member slow to serve again) delays the next one on the same resource.
	locks map[string]*sync.Mutex
	// lastStall is when the last netlink stall the stall probe saw ended.
	lastStall time.Time
	baseRSS   []int64
	baseGor   []int
	baseFDs   []int
}

// record is a fault as it ran.
type record struct {
	f          Fault
	phase      int
	start, end time.Time // end zero while in force
	note       string
}

func (rec *record) String() string {
	s := fmt.Sprintf("phase %d %v", rec.phase, rec.f)
	if rec.note != "" {
		s += " (" + rec.note + ")"
	}
	return s
}

func (r *runner) since(t time.Time) time.Duration { return t.Sub(r.start).Round(time.Millisecond) }

// violate records a broken invariant with the seed and the faults in force.
func (r *runner) violate(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.mu.Lock()
	defer r.mu.Unlock()
	var force []string
	for _, id := range slices.Sorted(maps.Keys(r.running)) {
		force = append(force, r.running[id].String())
	}
	full := fmt.Sprintf("at %v: %s [seed %d; faults in force: %s]", r.since(time.Now()), msg, r.cfg.Seed, strings.Join(force, "; "))
	if len(force) == 0 {
		full = fmt.Sprintf("at %v: %s [seed %d; no fault in force]", r.since(time.Now()), msg, r.cfg.Seed)
	}
	if !r.lastStall.IsZero() && time.Since(r.lastStall) < stallNear {
		full += fmt.Sprintf(" [the machine's netlink was stalled %v before]", time.Since(r.lastStall).Round(time.Second))
	}
	r.rep.Violations = append(r.rep.Violations, full)
	r.log.Logf("soak: VIOLATION %s", full)
}

func (r *runner) problem(format string, args ...any) {
	msg := fmt.Sprintf("at %v: ", r.since(time.Now())) + fmt.Sprintf(format, args...)
	r.mu.Lock()
	r.rep.Problems = append(r.rep.Problems, msg)
	r.mu.Unlock()
	r.log.Logf("soak: harness problem %s", msg)
}

func (r *runner) check(name string) {
	r.mu.Lock()
	r.rep.Checks[name]++
	r.mu.Unlock()
}

func (r *runner) setUp() error {
	for i := range r.cfg.Nodes {
		name := fmt.Sprintf("n%d", i+1)
		if r.cfg.Datastore == Kube {
			if err := r.createLiveNode(name, i+1); err != nil {
				return err
			}
		}
		n, err := r.c.AddNode(name)
		if err != nil {
			return err
		}
		r.nodes = append(r.nodes, n)
	}
	for _, n := range r.nodes {
		if err := n.WaitReady(readyTimeout); err != nil {
			return err
		}
	}
	for _, n := range r.nodes {
		p, err := r.c.AddPod(n, fmt.Sprintf("p%d", n.Index))
		if err != nil {
			return err
		}
		r.pods = append(r.pods, p)
		sn, err := n.Subnet()
		if err != nil {
			return err
		}
		r.subnets = append(r.subnets, sn)
		if r.cfg.DualStack {
			sn6, err := n.Subnet6()
			if err != nil {
				return err
			}
			r.subnets6 = append(r.subnets6, sn6)
		}
	}
	held := map[netip.Prefix]bool{}
	for _, sn := range r.subnets {
		if held[sn] {
			return fmt.Errorf("soak: two nodes hold %s at the start: %v", sn, r.subnets)
		}
		held[sn] = true
	}
	var free []netip.Prefix
	for i := range 256 {
		sn := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
		if !held[sn] {
			free = append(free, sn)
		}
	}
	// From the top of the network, away from the subnets a node would get next.
	slices.Reverse(free)
	r.churn, r.hostile = free[:churnSubnets], free[churnSubnets:churnSubnets+hostileSubset]
	if r.cfg.DualStack {
		held6 := map[netip.Prefix]bool{}
		for _, sn := range r.subnets6 {
			held6[sn] = true
		}
		base := netip.MustParsePrefix(network6).Addr().As16()
		for i := 255; i >= 0 && len(r.churn6) < churnSubnets; i-- {
			b := base
			b[7] = byte(i)
			if sn := netip.PrefixFrom(netip.AddrFrom16(b), 64); !held6[sn] {
				r.churn6 = append(r.churn6, sn)
			}
		}
	}

	// Every pod reaches every other before the faults begin.
	deadline := time.Now().Add(readyTimeout)
	for _, from := range r.pods {
		for _, to := range r.pods {
			for from != to {
				_, recv, err := cluster.Ping(from, to.IP, 1, 10*time.Millisecond)
				if err != nil {
					return err
				}
				if recv == 1 && r.cfg.DualStack {
					_, recv, err = cluster.Ping(from, to.IP6, 1, 10*time.Millisecond)
					if err != nil {
						return err
					}
				}
				if recv == 1 {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("soak: pod %s cannot reach pod %s after %v", from.Name, to.Name, readyTimeout)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	}
	// A Node's annotations may trail its weftd's readiness by a write.
	var leases map[netip.Prefix]lease
	for deadline := time.Now().Add(readyTimeout); ; time.Sleep(200 * time.Millisecond) {
		var err error
		leases, err = r.leases()
		if err == nil {
			err = r.leasesMissing(leases)
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return err
		}
	}
	r.macs, r.macs6 = make([]string, len(r.nodes)), make([]string, len(r.nodes))
	for i, sn := range r.subnets {
		r.macs[i], r.macs6[i] = leases[sn].mac, leases[sn].mac6
	}
	r.newMAC, r.newMAC6 = make([]bool, len(r.nodes)), make([]bool, len(r.nodes))
	r.nodeMu = make([]sync.Mutex, len(r.nodes))
	r.exited = make([]*os.ProcessState, len(r.nodes))
	r.tampered = make([]bool, len(r.nodes))
	r.locks = map[string]*sync.Mutex{}
	for i, n := range r.nodes {
		res, err := r.resources(n)
		if err != nil {
			return err
		}
		r.baseRSS = append(r.baseRSS, res.rss)
		r.baseGor = append(r.baseGor, res.goroutines)
		r.baseFDs = append(r.baseFDs, res.fds)
		r.rep.BaseRSS = max(r.rep.BaseRSS, res.rss)
		r.rep.BaseGoroutines = max(r.rep.BaseGoroutines, res.goroutines)
		r.rep.BaseFDs = max(r.rep.BaseFDs, res.fds)
		r.log.Logf("soak: n%d: subnet %s, VTEP MAC %q, RSS %d MiB, %d goroutines, %d fds", i+1, r.subnets[i], r.macs[i],
			res.rss>>20, res.goroutines, res.fds)
	}
	r.running = map[int]*record{}
	return nil
}

// leasesMissing says which node has no valid lease of its subnet yet.
func (r *runner) leasesMissing(leases map[netip.Prefix]lease) error {
	for i, sn := range r.subnets {
		if l, ok := leases[sn]; !ok || !l.valid {
			return fmt.Errorf("soak: no valid lease of node n%d's subnet %s", i+1, sn)
		}
	}
	return nil
}

// run runs the phases, the pings and the sampler, and fills the report.
func (r *runner) run() {
	r.start = time.Now()
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for i, from := range r.pods {
		for j, to := range r.pods {
			if i != j {
				bg.Go(func() { r.pingLoop(stop, i, j, from, to) })
			}
		}
	}
	bg.Go(func() { r.sampleLoop(stop) })
	bg.Go(func() { r.stallLoop(stop) })

	for pi, p := range r.sched.Phases {
		phaseStart := time.Now()
		r.log.Logf("soak: phase %d of %d begins (%v, %d faults)", pi+1, len(r.sched.Phases), p.Length, len(p.Faults))
		var wg sync.WaitGroup
		for _, f := range p.Faults {
			wg.Go(func() {
				time.Sleep(time.Until(phaseStart.Add(f.At)))
				r.inject(pi+1, f, phaseStart)
			})
		}
		wg.Wait()
		r.converge(pi + 1)
	}
	close(stop)
	bg.Wait()
	r.rep.Elapsed = time.Since(r.start)
	// A weftd built with the race detector reports races in its log; a panic ends up there too.
	for i, n := range r.nodes {
		data, err := os.ReadFile(n.LogPath)
		r.check("no data race or panic in weftd's log")
		switch {
		case err != nil:
			r.problem("n%d: %v", i+1, err)
		case strings.Contains(string(data), "WARNING: DATA RACE"):
			r.violate("n%d: weftd's log %s reports a data race:\n%s", i+1, n.LogPath, excerpt(string(data), "WARNING: DATA RACE"))
		case strings.Contains(string(data), "\npanic: "):
			r.violate("n%d: weftd's log %s reports a panic:\n%s", i+1, n.LogPath, excerpt(string(data), "\npanic: "))
		}
	}
	for _, rec := range r.done {
		r.rep.History = append(r.rep.History, fmt.Sprintf("%s: from %v to %v", rec, r.since(rec.start), r.since(rec.end)))
	}
}

// inject runs one fault: starts it, holds it until its time is up, ends it.
func (r *runner) inject(phase int, f Fault, phaseStart time.Time) {
	names := slices.Sorted(slices.Values(f.holds(len(r.c.EtcdMembers()))))
	r.mu.Lock()
	var held []*sync.Mutex
	for _, name := range names {
		if r.locks[name] == nil {
			r.locks[name] = new(sync.Mutex)
		}
		held = append(held, r.locks[name])
	}
	r.mu.Unlock()
	for _, m := range held {
		m.Lock()
		defer m.Unlock()
	}
	rec := &record{f: f, phase: phase, start: time.Now()}
	until := phaseStart.Add(f.At + f.For)
	if late := rec.start.Sub(phaseStart.Add(f.At)); late > 100*time.Millisecond {
		rec.note = fmt.Sprintf("%v late: a fault before it on %s ended late", late.Round(time.Millisecond), strings.Join(names, ", "))
		until = rec.start.Add(f.For)
	}
	r.mu.Lock()
	r.running[f.ID] = rec
	r.mu.Unlock()
	ok := r.apply(rec, until)
	r.mu.Lock()
	rec.end = time.Now()
	delete(r.running, f.ID)
	r.done = append(r.done, rec)
	if ok {
		r.rep.Injected[f.Kind]++
	} else {
		r.rep.Skipped[f.Kind]++
	}
	r.mu.Unlock()
	r.log.Logf("soak: %v ended (%v)", rec, time.Since(rec.start).Round(time.Millisecond))
}

// apply does what the fault's kind says, until the time is up; it reports whether the fault
// was injected.
func (r *runner) apply(rec *record, until time.Time) bool {
	f := rec.f
	hold := func() { time.Sleep(time.Until(until)) }
	switch f.Kind {
	case WeftdTerm, WeftdKill, WeftdKillMany:
		sig := syscall.SIGKILL
		if f.Kind == WeftdTerm {
			sig = syscall.SIGTERM
		}
		var wg sync.WaitGroup
		for _, i := range f.Nodes {
			wg.Go(func() { r.stopWeftd(i, sig) })
		}
		wg.Wait()
		hold()
		for _, i := range f.Nodes {
			r.nodeMu[i].Lock()
			if err := r.nodes[i].Start(); err != nil {
				r.problem("%v: starting weftd again: %v", f, err)
			}
			r.nodeMu[i].Unlock()
		}
	case WeftdFreeze:
		n := r.nodes[f.Nodes[0]]
		return r.pause(f, func() error { return n.Signal(syscall.SIGSTOP) }, func() error { return n.Signal(syscall.SIGCONT) }, hold)
	case EtcdKill, EtcdTerm, EtcdQuorumLoss, EtcdLeaderKill:
		members := r.c.EtcdMembers()
		var down []*cluster.EtcdMember
		if f.Kind == EtcdLeaderKill {
			m, err := r.leader()
			if err != nil {
				rec.note = err.Error()
				return false
			}
			rec.note = "leader " + m.Name
			down = append(down, m)
		} else {
			for _, i := range f.Members {
				down = append(down, members[i])
			}
		}
		sig := syscall.SIGKILL
		if f.Kind == EtcdTerm {
			sig = syscall.SIGTERM
		}
		for _, m := range down {
			if err := m.Stop(sig); err != nil {
				r.problem("%v: %v", f, err)
			}
		}
		if f.Kind == EtcdQuorumLoss {
			r.expectUnready(f, nil, time.Now(), until, "etcd's quorum lost")
		}
		hold()
		for _, m := range down {
			if !m.Running() {
				if err := m.Start(); err != nil {
					r.problem("%v: %v", f, err)
				}
			}
		}
	case EtcdLeaderPartition:
		m, err := r.leader()
		if err != nil {
			rec.note = err.Error()
			return false
		}
		rec.note = "leader " + m.Name
		if err := m.Isolate(true); err != nil {
			r.problem("%v: %v", f, err)
			return false
		}
		hold()
		if err := m.Isolate(false); err != nil {
			r.problem("%v: ending the cut: %v", f, err)
		}
	case EtcdFreeze:
		m := r.c.EtcdMembers()[f.Members[0]]
		return r.pause(f, func() error { return m.Signal(syscall.SIGSTOP) }, func() error { return m.Signal(syscall.SIGCONT) }, hold)
	case DatastoreCut:
		return r.cut(f, until)
	case EtcdCompact:
		r.compact(f, until)
	case LeaseChurn:
		r.churnLeases(f, until)
	case HostileLeases:
		r.hostileLeases(f, until)
	case APIServerKill:
		r.srv.Close()
		r.expectUnready(f, nil, time.Now(), until, "the API server killed")
		hold()
		if err := r.srv.Relaunch(); err != nil {
			r.problem("%v: %v", f, err)
		}
	case APIServerFreeze:
		return r.pause(f, r.srv.Pause, r.srv.Resume, func() {
			r.expectUnready(f, nil, time.Now(), until, "the API server frozen")
			hold()
		})
	case NodeChurn:
		r.churnNodes(f, until)
	case HostileNodes:
		r.hostileNodes(f, until)
	case AnnotationTamper:
		r.tamper(rec, until)
	case VXLANDelete:
		i := f.Nodes[0]
		dev, allow := vxlanDevice, r.newMAC
		if r.cfg.DualStack && f.Seed%2 == 1 {
			dev, allow = vxlan6Device, r.newMAC6
		}
		rec.note = dev
		r.nodeMu[i].Lock()
		// A weftd that runs, and has made or adopted its device (starting, it may not
		// have yet), makes it again with its lease's MAC; else the next makes a new one.
		// Its log says which: read before the deletion, it cannot say so too early.
		fresh := !r.nodes[i].Running() || !madeDevice(r.nodes[i])
		_, err := r.nodes[i].Exec("ip", "link", "del", dev)
		if err == nil && fresh {
			r.mu.Lock()
			allow[i] = true
			r.mu.Unlock()
			rec.note += "; weftd down or starting: a new MAC allowed"
		}
		r.nodeMu[i].Unlock()
		if err != nil {
			// weftd is down and its device was deleted already: nothing to delete is
			// no failure of the harness.
			rec.note += ": no device to delete"
			hold()
			return false
		}
		hold()
	case RouteDelete:
		n := r.nodes[f.Nodes[0]]
		routes, err := routesOf(n, false)
		if err != nil {
			r.problem("%v: %v", f, err)
			return false
		}
		var peers []route
		for _, rt := range routes {
			if rt.dst != r.subnets[f.Nodes[0]] {
				peers = append(peers, rt)
			}
		}
		if len(peers) == 0 {
			rec.note = "no peer route"
			return false
		}
		rt := peers[f.Seed%uint64(len(peers))]
		rec.note = "route to " + rt.dst.String()
		if _, err := n.Exec("ip", "route", "del", rt.dst.String()); err != nil {
			rec.note += ": " + err.Error()
			hold()
			return false
		}
		hold()
		// The route comes back when the node's weftd next converges: at once while it runs,
		// later when it is stopped or frozen, or still starting (it cannot finish while the
		// datastore does not answer, and until then the kernel keeps what the last weftd left,
		// less the route). The fault lasts until then: its pings are touched by it. A route
		// to a node that is not one of the soak's may rightly never come back.
		if slices.Contains(r.subnets, rt.dst) {
			r.waitRoute(n, rt.dst, rec)
		}
	case MTUChange:
		n := r.nodes[f.Nodes[0]]
		// Down to IPv6's minimum under the overlay: 1280, and VXLAN's 70 bytes over IPv6 in
		// a dual-stack network, where weftd refuses to start below (and says why).
		low := 1280
		if r.cfg.DualStack && r.cfg.Backend == "vxlan" {
			low += 70
		}
		mtu := low + int(f.Seed%uint64(underlayMTU-20-low+1))
		rec.note = fmt.Sprintf("eth0 MTU %d", mtu)
		if _, err := n.Exec("ip", "link", "set", "eth0", "mtu", fmt.Sprint(mtu)); err != nil {
			r.problem("%v: %v", f, err)
			return false
		}
		hold()
		if _, err := n.Exec("ip", "link", "set", "eth0", "mtu", fmt.Sprint(underlayMTU)); err != nil {
			r.problem("%v: %v", f, err)
		}
	default:
		r.problem("%v: unknown kind", f)
		return false
	}
	return true
}

// stopWeftd stops node i's weftd with sig: a SIGTERM must end it cleanly.
func (r *runner) stopWeftd(i int, sig syscall.Signal) {
	n := r.nodes[i]
	r.nodeMu[i].Lock()
	// A weftd that has not logged a line yet may not have reached its main, where it
	// starts handling SIGTERM: the signal kills it as it would any program then.
	started := logged(n)
	st, err := n.Stop(sig)
	if r.cfg.Backend == "vxlan" {
		if _, derr := n.Exec("ip", "link", "show", vxlanDevice); derr != nil {
			r.mu.Lock()
			r.newMAC[i] = true
			r.mu.Unlock()
		}
		if _, derr := n.Exec("ip", "link", "show", vxlan6Device); derr != nil && r.cfg.DualStack {
			r.mu.Lock()
			r.newMAC6[i] = true
			r.mu.Unlock()
		}
	}
	r.nodeMu[i].Unlock()
	switch {
	case err != nil && sig == syscall.SIGTERM:
		r.violate("n%d: weftd on SIGTERM: %v", i+1, err)
	case err != nil:
		r.problem("n%d: %v", i+1, err)
	case sig == syscall.SIGTERM && !started:
		r.log.Logf("soak: n%d: weftd stopped by SIGTERM before it logged a line (%v): not held against it", i+1, st)
		return
	case sig == syscall.SIGTERM && !st.Success():
		r.violate("n%d: weftd exited %v on SIGTERM; want 0", i+1, st)
	}
	if sig == syscall.SIGTERM {
		r.check("weftd exits 0 on SIGTERM")
	}
}

func (r *runner) leader() (*cluster.EtcdMember, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		m, err := r.c.EtcdLeader()
		if err == nil || time.Now().After(deadline) {
			return m, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// cut drops the node's packets to the datastore's port (etcd's client port, or the API
// server's) until the time is up; one that lasts long enough must turn /readyz unready.
func (r *runner) cut(f Fault, until time.Time) bool {
	i := f.Nodes[0]
	n := r.nodes[i]
	const table = "weftsoak"
	port := "2379"
	if r.cfg.Datastore == Kube {
		port = fmt.Sprint(cluster.APIServerPort)
	}
	for _, args := range [][]string{
		{"nft", "add", "table", "inet", table},
		{"nft", "add", "chain", "inet", table, "out", "{ type filter hook output priority 0 ; }"},
		{"nft", "add", "rule", "inet", table, "out", "tcp", "dport", port, "drop"},
	} {
		if _, err := n.Exec(args...); err != nil {
			r.problem("%v: %v", f, err)
			_, _ = n.Exec("nft", "delete", "table", "inet", table)
			return false
		}
	}
	r.expectUnready(f, []int{i}, time.Now(), until, "its path to the "+r.cfg.Datastore+" datastore cut")
	time.Sleep(time.Until(until))
	if _, err := n.Exec("nft", "delete", "table", "inet", table); err != nil {
		r.problem("%v: ending the cut: %v", f, err)
	}
	return true
}

// expectUnready checks, if the fault lasts long enough (10 s or more), that the nodes (nil:
// all) say on /readyz cutReadyzAfter after since that their datastore is out of reach.
func (r *runner) expectUnready(f Fault, nodes []int, since, until time.Time, what string) {
	if time.Until(until) < cutReadyzAfter+time.Second {
		return
	}
	if nodes == nil {
		for i := range r.nodes {
			nodes = append(nodes, i)
		}
	}
	time.Sleep(time.Until(since.Add(cutReadyzAfter)))
	for _, i := range nodes {
		// Only a weftd that ran all along can be held to it: one stopped or frozen by
		// another fault meanwhile has had less time to notice.
		if !r.weftdRunning(i) || r.weftdStopped(i, since) {
			continue
		}
		code, body, err := r.nodes[i].Get("/readyz")
		if err != nil {
			continue
		}
		r.check("readyz unready without the datastore")
		if code == http.StatusOK {
			r.violate("n%d: /readyz 200 %v after %s (%v; --datastore-timeout=%v)", i+1,
				time.Since(since).Round(time.Millisecond), what, f, datastoreTimeout)
		} else if !strings.Contains(body, "datastore") {
			r.log.Logf("soak: n%d with %s: /readyz %d %s", i+1, what, code, strings.TrimSpace(body))
		}
	}
}

// weftdStopped reports whether a fault stopped or froze node i's weftd at some time since.
func (r *runner) weftdStopped(i int, since time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range append(slices.Collect(maps.Values(r.running)), r.done...) {
		switch rec.f.Kind {
		case WeftdTerm, WeftdKill, WeftdKillMany, WeftdFreeze:
			if rec.f.Touches(i) && (rec.end.IsZero() || rec.end.After(since)) {
				return true
			}
		}
	}
	return false
}

// madeDevice reports whether the node's current weftd has made or adopted its VXLAN device,
// as its log says.
func madeDevice(n *cluster.Node) bool {
	run := lastRun(n)
	return strings.Contains(run, `msg="adopted VXLAN device"`) || strings.Contains(run, `msg="created VXLAN device"`)
}

// logged reports whether the node's current weftd has logged a line.
func logged(n *cluster.Node) bool {
	_, rest, _ := strings.Cut(lastRun(n), "\n")
	return strings.TrimSpace(rest) != ""
}

// lastRun is the log of the node's current (or last) weftd run: each follows a line the
// harness writes.
func lastRun(n *cluster.Node) string {
	data, err := os.ReadFile(n.LogPath)
	if err != nil {
		return ""
	}
	run := string(data)
	if i := strings.LastIndex(run, "=== weft-e2e "); i >= 0 {
		run = run[i:]
	}
	return run
}

// weftdRunning reports whether node i's weftd runs and no fault holds it stopped or frozen.
func (r *runner) weftdRunning(i int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.running {
		switch rec.f.Kind {
		case WeftdTerm, WeftdKill, WeftdKillMany, WeftdFreeze:
			if rec.f.Touches(i) {
				return false
			}
		}
	}
	return r.nodes[i].Running()
}

func (r *runner) leaseKey(sn netip.Prefix) string {
	return r.c.EtcdPrefix() + "/subnets/" + subnet.Lease{Subnet: sn}.Key()
}

// compact compacts etcd's history to its current revision every second or so until the time
// is up; a compaction etcd refuses (no quorum, nothing new) waits for the next round.
func (r *runner) compact(f Fault, until time.Time) {
	rng := newRand(f.Seed)
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
		resp, err := r.c.Etcd().Get(ctx, r.c.EtcdPrefix()+"/config")
		if err == nil {
			_, err = r.c.Etcd().Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
		}
		cancel()
		if err == nil {
			r.mu.Lock()
			r.rep.Compactions++
			r.mu.Unlock()
		}
		time.Sleep(time.Duration(500+rng.IntN(1000)) * time.Millisecond)
	}
}

// churnLease is the key and the value of the valid lease LeaseChurn writes on its i-th
// subnet (both families' in a dual-stack network): a node that does not exist, at underlay
// addresses no node has.
func (r *runner) churnLease(i int) (string, string) {
	l := subnet.Lease{Subnet: r.churn[i]}
	v := fmt.Sprintf(`"PublicIP":"192.0.2.%d","BackendType":%q`, 100+i, r.cfg.Backend)
	if r.cfg.Backend == "vxlan" {
		v += fmt.Sprintf(`,"BackendData":{"VNI":1,"VtepMAC":"0e:55:00:00:00:%02x"}`, i)
	}
	if r.cfg.DualStack {
		l.IPv6Subnet = r.churn6[i]
		v += fmt.Sprintf(`,"PublicIPv6":"fd77:77::1:%x"`, i)
		if r.cfg.Backend == "vxlan" {
			v += fmt.Sprintf(`,"BackendV6Data":{"VNI":1,"VtepMAC":"0e:56:00:00:00:%02x"}`, i)
		}
	}
	return r.c.EtcdPrefix() + "/subnets/" + l.Key(), "{" + v + "}"
}

// writeUntil calls write, each call with a deadline of timeout, again and again until the
// time is up, pausing between calls from lo to lo+spread milliseconds (drawn from rng after
// write's own draws, so that a fault's writes replay), and counts in *count the calls that
// succeed.
func (r *runner) writeUntil(until time.Time, rng *rand.Rand, timeout time.Duration, lo, spread int, count *int,
	write func(ctx context.Context) error) {
	for time.Now().Before(until) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		err := write(ctx)
		cancel()
		if err == nil {
			r.mu.Lock()
			*count++
			r.mu.Unlock()
		}
		time.Sleep(time.Duration(lo+rng.IntN(spread)) * time.Millisecond)
	}
}

// pause stops a process with stop, runs during, and lets the process go on with cont.
func (r *runner) pause(f Fault, stop, cont func() error, during func()) bool {
	if err := stop(); err != nil {
		r.problem("%v: %v", f, err)
		return false
	}
	during()
	if err := cont(); err != nil {
		r.problem("%v: %v", f, err)
	}
	return true
}

func (r *runner) churnLeases(f Fault, until time.Time) {
	rng := newRand(f.Seed)
	r.writeUntil(until, rng, etcdTimeout, 100, 300, &r.rep.ChurnWrites, func(ctx context.Context) error {
		key, value := r.churnLease(rng.IntN(len(r.churn)))
		var err error
		if rng.IntN(2) == 0 {
			_, err = r.c.Etcd().Put(ctx, key, value)
		} else {
			_, err = r.c.Etcd().Delete(ctx, key)
		}
		return err
	})
}

func (r *runner) hostileLeases(f Fault, until time.Time) {
	rng := newRand(f.Seed)
	r.writeUntil(until, rng, etcdTimeout, 100, 200, &r.rep.HostileWrite, func(ctx context.Context) error {
		i := rng.IntN(len(r.hostile))
		live := rng.IntN(len(r.nodes))
		var v string
		switch rng.IntN(6) {
		case 0:
			v = `{"PublicIP":`
		case 1:
			v = `{"PublicIP":"not an address","BackendType":"vxlan","BackendData":{"VNI":1}}`
		case 2: // a copy of a live node's public IP and VTEP MAC
			r.mu.Lock()
			mac := r.macs[live]
			r.mu.Unlock()
			v = fmt.Sprintf(`{"PublicIP":%q,"BackendType":%q,"BackendData":{"VNI":1,"VtepMAC":%q}}`,
				r.nodes[live].IP, r.cfg.Backend, mac)
		case 3:
			v = fmt.Sprintf(`{"PublicIP":"192.0.2.%d","BackendType":"vxlan","BackendData":{"VNI":1,"VtepMAC":"01:00:5e:00:00:01"}}`, 150+i)
		case 4:
			v = fmt.Sprintf(`{"PublicIP":"192.0.2.%d","BackendType":"udp","BackendData":{"VNI":1}}`, 150+i)
		default:
			v = `[]`
		}
		_, err := r.c.Etcd().Put(ctx, r.leaseKey(r.hostile[i]), v)
		return err
	})
	// The hostile leases go, whatever state etcd is in: retried until it serves.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ops := make([]clientv3.Op, 0, len(r.hostile))
		for _, sn := range r.hostile {
			ops = append(ops, clientv3.OpDelete(r.leaseKey(sn)))
		}
		ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
		_, err := r.c.Etcd().Txn(ctx).Then(ops...).Commit()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			r.problem("%v: deleting the hostile leases: %v", f, err)
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// lease is what the soak reads of a lease in etcd.
type lease struct {
	publicIP string
	mac      string // VtepMAC, lower-case; "" for host-gw
	valid    bool   // parsed, and usable by the cluster's backend
	// The IPv6 half: its subnet, public address and VtepMAC.
	sn6             netip.Prefix
	publicIP6, mac6 string
}

// leases reads every lease in etcd, by IPv4 subnet; values that do not parse are there,
// not valid.
func (r *runner) leases() (map[netip.Prefix]lease, error) {
	if r.cfg.Datastore == Kube {
		return r.kubeLeases()
	}
	ctx, cancel := context.WithTimeout(context.Background(), etcdTimeout)
	defer cancel()
	dir := r.c.EtcdPrefix() + "/subnets/"
	resp, err := r.c.Etcd().Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing leases under %s: %w", dir, err)
	}
	out := map[netip.Prefix]lease{}
	for _, kv := range resp.Kvs {
		sn, sn6, err := subnet.ParseKey(strings.TrimPrefix(string(kv.Key), dir))
		if err != nil {
			return nil, fmt.Errorf("lease key %s: %w", kv.Key, err)
		}
		var v struct {
			PublicIP, PublicIPv6       string
			BackendType                string
			BackendData, BackendV6Data struct{ VtepMAC string }
		}
		l := lease{sn6: sn6}
		if json.Unmarshal(kv.Value, &v) == nil {
			_, ipErr := netip.ParseAddr(v.PublicIP)
			l.publicIP, l.mac = v.PublicIP, strings.ToLower(v.BackendData.VtepMAC)
			l.publicIP6, l.mac6 = v.PublicIPv6, strings.ToLower(v.BackendV6Data.VtepMAC)
			l.valid = ipErr == nil && v.BackendType == r.cfg.Backend
			if r.cfg.DualStack {
				_, ip6Err := netip.ParseAddr(v.PublicIPv6)
				l.valid = l.valid && sn6.IsValid() && ip6Err == nil
			}
		}
		out[sn.Masked()] = l
	}
	return out, nil
}

// stallLoop times a netlink request in a node every second until stop, and records the
// stalls (see Report.Stalls).
func (r *runner) stallLoop(stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		start := time.Now()
		_, _ = r.nodes[0].Exec("ip", "link", "show", "lo")
		if took := time.Since(start); took > stallAfter {
			r.mu.Lock()
			r.lastStall = time.Now()
			r.rep.Stalls = append(r.rep.Stalls, fmt.Sprintf("%v at %v", took.Round(100*time.Millisecond), r.since(start)))
			r.mu.Unlock()
			r.log.Logf("soak: the machine's netlink stalled: ip link show took %v", took.Round(time.Millisecond))
		}
	}
}

// sampleLoop checks the continuous invariants every sampleEvery until stop.
func (r *runner) sampleLoop(stop <-chan struct{}) {
	t := time.NewTicker(sampleEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.sample()
		}
	}
}

// sample checks that every node keeps its subnet, its lease its public IP and VTEP MAC, no
// other lease takes its public IP, and its weftd's resources stay bounded.
func (r *runner) sample() {
	for i, n := range r.nodes {
		sn, err := n.Subnet()
		r.check("subnet.env keeps the subnet")
		if err != nil {
			r.violate("n%d: %v", i+1, err)
		} else if sn != r.subnets[i] {
			r.violate("n%d: subnet.env names %s; it had %s", i+1, sn, r.subnets[i])
		}
		if r.cfg.DualStack {
			if sn6, err := n.Subnet6(); err != nil {
				r.violate("n%d: %v", i+1, err)
			} else if sn6 != r.subnets6[i] {
				r.violate("n%d: subnet.env names IPv6 subnet %s; it had %s", i+1, sn6, r.subnets6[i])
			}
		}
	}
	leases, err := r.leases()
	if err != nil {
		r.mu.Lock()
		r.rep.DatastoreUnreachableSamples++
		r.mu.Unlock()
	} else {
		hostile := map[netip.Prefix]bool{}
		for _, sn := range r.hostile {
			hostile[sn] = true
		}
		// A tampered node's lease says what the tamperer wrote until its weftd writes it back.
		tampered := map[netip.Prefix]bool{}
		for i := range r.nodes {
			if r.stillTampered(i, leases[r.subnets[i]]) {
				tampered[r.subnets[i]] = true
			}
		}
		for i, n := range r.nodes {
			if !tampered[r.subnets[i]] {
				r.checkOwnLease(i, n, leases)
			}
			r.check("one lease per node")
			for sn, other := range leases {
				if sn != r.subnets[i] && !hostile[sn] && !tampered[sn] && other.publicIP == n.IP.String() {
					r.violate("n%d: a second lease, of %s, names its public IP %s (its own is %s)", i+1, sn, n.IP, r.subnets[i])
				}
			}
		}
	}
	for i, n := range r.nodes {
		r.checkAlive(i)
		if !r.weftdRunning(i) {
			continue
		}
		res, err := r.resources(n)
		if err != nil {
			continue // it may have just stopped
		}
		r.check("resources bounded")
		r.mu.Lock()
		r.rep.PeakRSS = max(r.rep.PeakRSS, res.rss)
		r.rep.PeakGoroutines = max(r.rep.PeakGoroutines, res.goroutines)
		r.rep.PeakFDs = max(r.rep.PeakFDs, res.fds)
		r.mu.Unlock()
		// Generous bounds: a leak grows without end over a soak; these catch it within
		// minutes, not the ups and downs of a busy daemon.
		if res.rss > 3*r.baseRSS[i]+64<<20 {
			r.violate("n%d: weftd's RSS %d MiB; %d MiB at the start", i+1, res.rss>>20, r.baseRSS[i]>>20)
		}
		if res.goroutines >= 0 && res.goroutines > 3*r.baseGor[i]+100 {
			r.violate("n%d: weftd has %d goroutines; %d at the start", i+1, res.goroutines, r.baseGor[i])
		}
		if res.fds > 2*r.baseFDs[i]+64 {
			r.violate("n%d: weftd has %d open files; %d at the start", i+1, res.fds, r.baseFDs[i])
		}
	}
}

// checkOwnLease checks that node i's lease keeps its subnet, public IP and VTEP MAC.
func (r *runner) checkOwnLease(i int, n *cluster.Node, leases map[netip.Prefix]lease) {
	l, ok := leases[r.subnets[i]]
	r.check("lease keeps subnet, public IP, VTEP MAC")
	switch {
	case !ok:
		r.violate("n%d: its lease of %s is gone from the datastore", i+1, r.subnets[i])
	case l.publicIP != n.IP.String():
		r.violate("n%d: the lease of its subnet %s names public IP %s", i+1, r.subnets[i], l.publicIP)
	case r.cfg.DualStack && (l.sn6 != r.subnets6[i] || l.publicIP6 != n.IP6.String()):
		r.violate("n%d: the lease of its subnet %s names IPv6 subnet %s and public IPv6 %s; want %s and %s",
			i+1, r.subnets[i], l.sn6, l.publicIP6, r.subnets6[i], n.IP6)
	case r.cfg.Backend == "vxlan":
		claimed := func(mac func(lease) string) func(string) bool {
			return func(m string) bool {
				for sn, o := range leases {
					if sn != r.subnets[i] && m != "" && mac(o) == m {
						return true
					}
				}
				return false
			}
		}
		r.sameMAC(i, vxlanDevice, l.mac, r.macs, r.newMAC, claimed(func(o lease) string { return o.mac }))
		if r.cfg.DualStack {
			r.sameMAC(i, vxlan6Device, l.mac6, r.macs6, r.newMAC6, claimed(func(o lease) string { return o.mac6 }))
		}
	}
}

// sameMAC checks that node i's lease still publishes the VTEP MAC it did for dev (macs[i]),
// unless a new one is allowed: allow[i], the device went with weftd down or starting (which
// makes it again with the MAC its lease publishes, whoever wrote that), or another node's
// annotations were tampered with to claim its MAC; or claimed, another lease publishes the
// MAC it had (weftd takes a new one when that lease comes first).
func (r *runner) sameMAC(i int, dev, mac string, macs []string, allow []bool, claimed func(mac string) bool) {
	r.mu.Lock()
	was, allowed := macs[i], allow[i]
	if mac == was {
		r.mu.Unlock()
		return
	}
	contested := !allowed && claimed(was)
	if allowed || contested {
		r.rep.MACChanges++
	}
	// Each change is reported once.
	macs[i], allow[i] = mac, false
	r.mu.Unlock()
	switch {
	case allowed:
		r.log.Logf("soak: n%d: %s's VTEP MAC %s -> %s: a new one was allowed (the device deleted with its weftd down or starting, or its MAC impersonated)", i+1, dev, was, mac)
	case contested:
		r.log.Logf("soak: n%d: %s's VTEP MAC %s -> %s: another lease claimed %s", i+1, dev, was, mac, was)
	default:
		r.violate("n%d: its lease's VTEP MAC of %s changed from %s to %s while its weftd ran", i+1, dev, was, mac)
	}
}

// checkAlive reports a weftd that exited while no fault stopped it, once per run.
func (r *runner) checkAlive(i int) {
	n := r.nodes[i]
	r.nodeMu[i].Lock() // not while a fault stops or starts it
	defer r.nodeMu[i].Unlock()
	st := n.ExitState()
	r.mu.Lock()
	held := false
	for _, rec := range r.running {
		switch rec.f.Kind {
		case WeftdTerm, WeftdKill, WeftdKillMany:
			held = held || rec.f.Touches(i)
		}
	}
	seen := r.exited[i] == st
	r.exited[i] = st
	r.mu.Unlock()
	r.check("weftd runs unless stopped")
	if st != nil && !held && !seen {
		r.violate("n%d: weftd exited on its own (%v); the end of its log:\n%s", i+1, st, n.LogTail(5))
	}
}

// usage is what a weftd holds.
type usage struct {
	rss        int64
	goroutines int // -1 when /metrics did not answer
	fds        int
}

func (r *runner) resources(n *cluster.Node) (usage, error) {
	pid := n.Pid()
	mem, err := cluster.ReadMemory(pid)
	if err != nil {
		return usage{}, fmt.Errorf("node %s: %w", n.Name, err)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return usage{}, fmt.Errorf("node %s: open files: %w", n.Name, err)
	}
	u := usage{rss: mem.RSS, fds: len(fds), goroutines: -1}
	if m, err := metrics(n); err == nil {
		if g, ok := m["go_goroutines"]; ok {
			u.goroutines = int(g)
		}
	}
	return u, nil
}

// metrics reads the node's /metrics: each sample's value by its name and labels as written.
func metrics(n *cluster.Node) (map[string]float64, error) {
	code, body, err := n.Get("/metrics")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("node %s: /metrics: %d", n.Name, code)
	}
	m := map[string]float64{}
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(value, &v); err == nil {
			m[name] = v
		}
	}
	return m, nil
}

// pingLoop pings from one pod to another in runs until stop, and counts each run's losses
// against weft unless a fault touched either node during it.
func (r *runner) pingLoop(stop <-chan struct{}, i, j int, from, to *cluster.Pod) {
	for k := 0; ; k++ {
		select {
		case <-stop:
			return
		default:
		}
		// Dual-stack: the families take turns.
		dst := to.IP
		if r.cfg.DualStack && k%2 == 1 {
			dst = to.IP6
		}
		begin := time.Now()
		run, err := cluster.StartPing(from, dst, pingCount, pingInterval)
		if err != nil {
			r.problem("%v", err)
			return
		}
		sent, recv, err := run.Wait()
		end := time.Now()
		if err != nil {
			r.problem("%v", err)
			time.Sleep(time.Second)
			continue
		}
		touched, keeps := r.touched(i, j, begin, end)
		r.mu.Lock()
		r.rep.PingRuns++
		if touched != "" {
			r.rep.TouchedSent += sent
			r.rep.TouchedLost += sent - recv
			if sent > recv {
				r.rep.TouchedLostBy[touched] += sent - recv
			}
		} else {
			r.rep.PingsSent += sent
			r.rep.PingsLost += sent - recv
		}
		r.mu.Unlock()
		if touched != "" && recv < sent {
			r.log.Logf("soak: ping %s (n%d) -> %s %s (n%d): %d of %d lost from %v to %v, touched by %s",
				from.Name, i+1, to.Name, dst, j+1, sent-recv, sent, r.since(begin), r.since(end), touched)
		}
		switch {
		case touched == "":
			r.check(checkUntouched)
			if recv != sent || sent == 0 {
				r.violate("ping %s (n%d) -> %s %s (n%d): %d of %d lost from %v to %v, no fault touching either node",
					from.Name, i+1, to.Name, dst, j+1, sent-recv, sent, r.since(begin), r.since(end))
			}
		case keeps:
			r.check(checkKeepsTraffic)
			if recv != sent || sent == 0 {
				r.violate("ping %s (n%d) -> %s %s (n%d): %d of %d lost from %v to %v, touched only by %s, which must not interrupt traffic",
					from.Name, i+1, to.Name, dst, j+1, sent-recv, sent, r.since(begin), r.since(end), touched)
			}
		}
	}
}

// The invariants of the pings.
const (
	checkUntouched    = "no ping lost between untouched nodes"
	checkKeepsTraffic = "no ping lost through weftd stopped or cut from its datastore"
)

// touched names the kinds of the faults touching node i or j that were in force (or
// settling) in [begin, end], or returns ""; keeps is whether every one of them keeps
// traffic (Kind.KeepsTraffic).
func (r *runner) touched(i, j int, begin, end time.Time) (names string, keeps bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kinds := map[Kind]bool{}
	note := func(rec *record) {
		if !rec.f.Touches(i) && !rec.f.Touches(j) {
			return
		}
		stopped := rec.end
		if stopped.IsZero() {
			stopped = time.Now()
		}
		// A second before: a request sent just before the fault may be answered after.
		if rec.start.Before(end) && begin.Add(-time.Second).Before(stopped.Add(r.cfg.Settle)) {
			kinds[rec.f.Kind] = true
		}
	}
	for _, rec := range r.running {
		note(rec)
	}
	for _, rec := range r.done {
		note(rec)
	}
	var list []string
	keeps = true
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		list = append(list, string(k))
		keeps = keeps && k.KeepsTraffic()
	}
	return strings.Join(list, "+"), keeps && len(list) > 0
}

// converge waits, after a phase, until every node runs, is ready and has programmed
// exactly the leases in etcd, within cfg.Converge; else it records what differs.
func (r *runner) converge(phase int) {
	start := time.Now()
	var last []string
	for {
		last = r.convergenceErrors()
		if len(last) == 0 {
			break
		}
		if time.Since(start) > r.cfg.Converge {
			r.violate("phase %d: not converged %v after its faults ended: %s", phase, r.cfg.Converge, strings.Join(last, "; "))
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	for _, name := range []string{"converged after a phase: readyz, routes, neighbours, FDB", "weft_peers agrees with the kernel",
		"lease VTEP MAC is the device's"} {
		r.check(name)
	}
	if len(last) == 0 {
		r.log.Logf("soak: phase %d: converged %v after its last fault ended", phase, time.Since(start).Round(time.Millisecond))
		// Every lease has the MAC of its device now: a new one allowed and not taken
		// is allowed no longer.
		r.mu.Lock()
		clear(r.newMAC)
		clear(r.newMAC6)
		clear(r.tampered)
		r.mu.Unlock()
	}
}

// convergenceErrors says how the cluster differs from converged, nil if it does not.
func (r *runner) convergenceErrors() []string {
	var errs []string
	leases, err := r.leases()
	if err != nil {
		return []string{err.Error()}
	}
	for i, n := range r.nodes {
		name := fmt.Sprintf("n%d", i+1)
		if !n.Running() {
			errs = append(errs, name+": weftd not running")
			continue
		}
		code, body, err := n.Get("/readyz")
		if err != nil || code != http.StatusOK {
			errs = append(errs, fmt.Sprintf("%s: /readyz %d %s %v", name, code, strings.TrimSpace(body), err))
		}
		want, want6 := map[netip.Prefix]peer{}, map[netip.Prefix]peer{}
		for sn, l := range leases {
			if sn != r.subnets[i] && l.valid {
				want[sn] = peer{l.publicIP, l.mac}
				if r.cfg.DualStack {
					want6[l.sn6] = peer{l.publicIP6, l.mac6}
				}
			}
		}
		if bad := leasesInvalid(leases, r.hostile); bad != "" {
			errs = append(errs, bad)
		}
		errs = append(errs, r.kernelErrors(i, false, want)...)
		r.mu.Lock()
		mac := r.macs[i]
		r.mu.Unlock()
		if own, ok := leases[r.subnets[i]]; !ok {
			errs = append(errs, fmt.Sprintf("%s: no lease of its subnet %s", name, r.subnets[i]))
		} else if own.publicIP != n.IP.String() || own.mac != mac {
			errs = append(errs, fmt.Sprintf("%s: its lease names public IP %s and VTEP MAC %q; want %s and %q",
				name, own.publicIP, own.mac, n.IP, mac))
		}
		if r.cfg.DualStack {
			errs = append(errs, r.kernelErrors(i, true, want6)...)
		}
		if m, err := metrics(n); err != nil {
			errs = append(errs, fmt.Sprintf("%s: /metrics: %v", name, err))
		} else if got := m[fmt.Sprintf(`weft_peers{backend=%q,state="programmed"}`, r.cfg.Backend)]; int(got) != len(want) {
			errs = append(errs, fmt.Sprintf("%s: weft_peers programmed %v; the leases are %d", name, got, len(want)))
		}
	}
	return errs
}

// leasesInvalid names leases in etcd that no node can use outside the hostile subnets, whose
// writer deletes them: there should be none.
func leasesInvalid(leases map[netip.Prefix]lease, hostile []netip.Prefix) string {
	var bad []string
	for sn, l := range leases {
		if !l.valid && !slices.Contains(hostile, sn) {
			bad = append(bad, sn.String())
		}
	}
	if len(bad) == 0 {
		return ""
	}
	slices.Sort(bad)
	return "unusable leases in etcd: " + strings.Join(bad, ", ")
}

// route is a route in a node's main table.
type route struct {
	dst     netip.Prefix
	gateway string
	dev     string
}

// waitRoute waits, for at most restoreTimeout, until node n has a route to dst again, and
// notes in rec how long that took.
func (r *runner) waitRoute(n *cluster.Node, dst netip.Prefix, rec *record) {
	ended := time.Now()
	for time.Since(ended) < restoreTimeout {
		routes, err := routesOf(n, false)
		if err == nil && slices.ContainsFunc(routes, func(rt route) bool { return rt.dst == dst }) {
			rec.note += fmt.Sprintf("; restored %v after", time.Since(ended).Round(time.Millisecond))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	rec.note += fmt.Sprintf("; not restored %v after", restoreTimeout)
}

// routesOf lists the node's routes into the pod network of a family, but the ones to its own
// subnet (cni0's).
func routesOf(n *cluster.Node, v6 bool) ([]route, error) {
	family, pods := "-4", netip.MustParsePrefix(network)
	if v6 {
		family, pods = "-6", netip.MustParsePrefix(network6)
	}
	out, err := n.Exec("ip", "-j", family, "route", "show")
	if err != nil {
		return nil, err
	}
	var raw []struct {
		Dst, Gateway, Dev string
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		return nil, fmt.Errorf("node %s: ip -j route: %w: %s", n.Name, err, out)
	}
	var routes []route
	for _, rt := range raw {
		dst, err := netip.ParsePrefix(rt.Dst)
		if err != nil || !pods.Overlaps(dst) || rt.Dev == cluster.PodBridge {
			continue
		}
		routes = append(routes, route{dst: dst, gateway: rt.Gateway, dev: rt.Dev})
	}
	return routes, nil
}

// peer is what a node programs for a peer's subnet of one family: its public address, and
// with vxlan its VTEP MAC.
type peer struct{ publicIP, mac string }

// kernelErrors compares node i's routes, neighbours and FDB entries of a family with the
// peers it should have programmed, and its device's MAC with its lease's.
func (r *runner) kernelErrors(i int, v6 bool, want map[netip.Prefix]peer) []string {
	n := r.nodes[i]
	name := fmt.Sprintf("n%d", i+1)
	dev, underlay, own := vxlanDevice, "eth0", r.macs
	if v6 {
		dev, own = vxlan6Device, r.macs6
	}
	var errs []string
	routes, err := routesOf(n, v6)
	if err != nil {
		return []string{err.Error()}
	}
	got := map[netip.Prefix]route{}
	for _, rt := range routes {
		got[rt.dst] = rt
	}
	for sn, p := range want {
		rt, ok := got[sn]
		wantGW, wantDev := sn.Addr().String(), dev
		if r.cfg.Backend != "vxlan" {
			wantGW, wantDev = p.publicIP, underlay
		}
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: no route to %s", name, sn))
		case rt.gateway != wantGW || rt.dev != wantDev:
			errs = append(errs, fmt.Sprintf("%s: route to %s via %s dev %s; want via %s dev %s", name, sn, rt.gateway, rt.dev, wantGW, wantDev))
		}
	}
	for sn := range got {
		if _, ok := want[sn]; !ok {
			errs = append(errs, fmt.Sprintf("%s: a route to %s, which no lease holds", name, sn))
		}
	}
	if r.cfg.Backend != "vxlan" {
		return errs
	}
	neigh, err := jsonOf(n, "ip", "-j", "neigh", "show", "dev", dev)
	if err != nil {
		return append(errs, err.Error())
	}
	gotNeigh := map[string]string{}
	for _, e := range neigh {
		gotNeigh[str(e["dst"])] = strings.ToLower(str(e["lladdr"]))
	}
	fdb, err := jsonOf(n, "bridge", "-j", "fdb", "show", "dev", dev)
	if err != nil {
		return append(errs, err.Error())
	}
	gotFDB := map[string]string{}
	for _, e := range fdb {
		if dst := str(e["dst"]); dst != "" {
			gotFDB[strings.ToLower(str(e["mac"]))] = dst
		}
	}
	wantNeigh, wantFDB := map[string]string{}, map[string]string{}
	for sn, p := range want {
		wantNeigh[sn.Addr().String()] = p.mac
		wantFDB[p.mac] = p.publicIP
	}
	if !maps.Equal(gotNeigh, wantNeigh) {
		errs = append(errs, fmt.Sprintf("%s: neighbours on %s %v; the leases want %v", name, dev, gotNeigh, wantNeigh))
	}
	if !maps.Equal(gotFDB, wantFDB) {
		errs = append(errs, fmt.Sprintf("%s: FDB of %s %v; the leases want %v", name, dev, gotFDB, wantFDB))
	}
	link, err := jsonOf(n, "ip", "-j", "link", "show", dev)
	if err != nil || len(link) != 1 {
		return append(errs, fmt.Sprintf("%s: %s: %v", name, dev, err))
	}
	r.mu.Lock()
	mac := own[i]
	r.mu.Unlock()
	if got := strings.ToLower(str(link[0]["address"])); got != mac {
		errs = append(errs, fmt.Sprintf("%s: %s has MAC %s; its lease says %s", name, dev, got, mac))
	}
	return errs
}

func jsonOf(n *cluster.Node, args ...string) ([]map[string]any, error) {
	out, err := n.Exec(args...)
	if err != nil {
		return nil, err
	}
	var v []map[string]any
	if strings.TrimSpace(out) == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		return nil, fmt.Errorf("node %s: %s: %w: %s", n.Name, strings.Join(args, " "), err, out)
	}
	return v, nil
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// newRand is the random source of a fault's own choices.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

// excerpt is the part of a log from the first mark on, at most 60 lines: the report a
// violation carries, since CI keeps the test's output and not the cluster's files.
func excerpt(log, mark string) string {
	_, rest, _ := strings.Cut(log, mark)
	lines := strings.Split(mark+rest, "\n")
	return strings.Join(lines[:min(len(lines), 60)], "\n")
}
