package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/weftnet/weft/subnet"
)

const (
	// underlayName is the suffix of the underlay namespace, so no node may be called so.
	underlayName = "ul"
	// underlayBridge is the bridge in the underlay namespace that every node's eth0 is
	// plugged into.
	underlayBridge = "br0"
	// underlayBridgeMAC is the underlay bridge's MAC, set when it is made. A bridge without
	// one set takes the lowest MAC of its ports, so it changed as nodes joined: a node that
	// had resolved the gateway before a lower MAC joined sent to a MAC no port has, and its
	// connections to etcd and the API server stalled until its neighbour entry went stale
	// (about 30 s).
	underlayBridgeMAC = "02:77:65:66:74:01"
	// Underlay is the underlay's IPv4 network (TEST-NET-1): the gateway and every node's
	// eth0 are in it.
	Underlay = "192.0.2.0/24"
	// UnderlayGateway is the underlay bridge's own IPv4 address; etcd listens on it.
	UnderlayGateway = "192.0.2.1"
	underlayBits    = 24
	// Underlay6 is the underlay's IPv6 network, a ULA prefix: every node's eth0 has an
	// address in it beside its IPv4 one (see Node.IP6), and its default IPv6 route is via
	// UnderlayGateway6.
	Underlay6 = "fd77:77::/64"
	// UnderlayGateway6 is the underlay bridge's own IPv6 address; etcd listens on it too
	// (EtcdURL6).
	UnderlayGateway6 = "fd77:77::1"
	underlayBits6    = 64
	// firstNodeHost is added to a node's index (1, 2, ...) to make its underlay addresses.
	firstNodeHost = 10
	maxNodes      = 240

	// DefaultEtcdPrefix is flannel's etcd prefix.
	DefaultEtcdPrefix = "/coreos.com/network"

	// etcdOpTimeout bounds each etcd call the harness makes.
	etcdOpTimeout = 10 * time.Second
)

// Logger receives the harness's progress messages. A *testing.T fits; so does anything with a
// Logf method. If it also has Cleanup(func()) (a *testing.T or *testing.B), New registers
// Close there; if it has Failed() bool, a cluster closed after a failure keeps its directory
// (node logs, etcd log) and prints where it is.
type Logger interface {
	Logf(format string, args ...any)
}

// Options describe a cluster.
type Options struct {
	// NetConf is the net-conf.json written to <EtcdPrefix>/config. Required.
	NetConf string
	// Weftd is the weftd binary each node runs. Empty: nodes run no daemon, which is for
	// testing the harness itself (write a subnet.env with Node.WriteSubnetEnv to add pods).
	Weftd string
	// WeftdArgs are extra flags for every weftd, after the ones the harness sets.
	WeftdArgs []string
	// CNIBin is the directory holding the bridge and host-local plugins; AddPod needs it.
	CNIBin string
	// WeftCNI is the weft CNI plugin binary (cmd/weft); AddWeftPod needs it, and CNIBin for
	// its delegates.
	WeftCNI string
	// Prefix names the cluster's namespaces (<Prefix>-ul, <Prefix>-<node>, ...): 1 to 10
	// lower-case letters or digits. Default: "wf" and four random ones.
	Prefix string
	// Dir holds the cluster's files: etcd's data and log, each node's log, subnet.env and
	// IPAM state. Default: a new directory under os.TempDir().
	Dir string
	// EtcdPrefix is the etcd key prefix. Default DefaultEtcdPrefix.
	EtcdPrefix string
	// EtcdCommand, if set, runs etcd as this command inside the underlay namespace (with
	// the member's directory as its last argument) instead of inside this process, once for
	// each member; it must serve the member that the directory describes, as ServeEtcd
	// does. The demo uses it with Keep so that etcd outlives it; tests, to stop and start
	// members (see EtcdMembers).
	EtcdCommand []string
	// EtcdMembers is how many members the cluster's etcd has: 0 or 1 for one, serving
	// EtcdURL and EtcdURL6; up to 9, the i-th serving http://192.0.2.i:2379 (the first
	// EtcdURL and EtcdURL6 too), each added to the underlay bridge. The nodes and the
	// harness's client are given every member (EtcdEndpoints). More than one needs
	// EtcdCommand: a member in this process would dial its peers from whatever thread,
	// outside the underlay namespace.
	EtcdMembers int
	// Keep makes Close leave everything running (for Teardown to remove later). It needs
	// EtcdCommand.
	Keep bool
	// Kube, if set, runs the nodes in Kubernetes mode (see KubeOptions). The network config
	// is written to etcd all the same, where a kube-mode weftd never looks.
	Kube *KubeOptions
}

// Cluster is a set of network namespaces on this machine forming a weft cluster.
type Cluster struct {
	opts   Options
	log    Logger
	prefix string
	dir    string
	ul     string // underlay namespace

	etcd    *embed.Etcd   // the in-process etcd; nil with EtcdCommand
	members []*EtcdMember // the etcd processes with EtcdCommand
	client  *clientv3.Client

	mu    sync.Mutex
	nodes []*Node
	pods  []*Pod

	// failed keeps the files at Close for failures the Logger cannot report: New's own,
	// and a panic, which (as of Go 1.26) testing.T.Failed does not report to cleanups.
	failed atomic.Bool

	// started is set once New has succeeded: a kept cluster that failed to start is
	// removed all the same.
	started bool

	closeOnce sync.Once
	closeErr  error
}

// New creates the underlay namespace with its bridge, starts etcd in it and writes the
// network config. It first sweeps what killed earlier runs left behind (see Sweep). On
// error, whatever it had made is removed again.
func New(log Logger, opts Options) (*Cluster, error) {
	if opts.NetConf == "" {
		return nil, errors.New("cluster: Options.NetConf is required")
	}
	if opts.Keep && len(opts.EtcdCommand) == 0 {
		return nil, errors.New("cluster: Options.Keep needs Options.EtcdCommand: an etcd inside this process would die with it")
	}
	if opts.EtcdMembers < 0 || opts.EtcdMembers > maxEtcdMembers {
		return nil, fmt.Errorf("cluster: Options.EtcdMembers=%d: want 0 to %d", opts.EtcdMembers, maxEtcdMembers)
	}
	if opts.EtcdMembers > 1 && len(opts.EtcdCommand) == 0 {
		return nil, errors.New("cluster: Options.EtcdMembers > 1 needs Options.EtcdCommand: a member inside this process would dial its peers from outside the underlay namespace")
	}
	if opts.Kube != nil && opts.Kube.Kubeconfig == nil {
		return nil, errors.New("cluster: Options.Kube needs Kubeconfig: a kube-mode weftd cannot reach the API server without one")
	}
	if opts.Prefix != "" && !isName(opts.Prefix) {
		return nil, fmt.Errorf("cluster: prefix %q: want 1 to 10 lower-case letters or digits", opts.Prefix)
	}
	if opts.EtcdPrefix == "" {
		opts.EtcdPrefix = DefaultEtcdPrefix
	}
	if opts.Weftd != "" {
		if _, err := os.Stat(opts.Weftd); err != nil {
			return nil, fmt.Errorf("cluster: weftd binary: %w", err)
		}
	}

	removed, err := Sweep()
	for _, p := range removed {
		log.Logf("cluster: removed stale cluster %s left by an earlier run (its files, if any, stay in %s)", p,
			filepath.Join(os.TempDir(), "weft-e2e-"+p+"-*"))
	}
	if err != nil {
		// Leftovers are untidy, not fatal: a fresh prefix cannot clash with them.
		log.Logf("cluster: %v", err)
	}

	c := &Cluster{opts: opts, log: log}
	if err := c.claim(); err != nil {
		return nil, err
	}
	c.ul = c.prefix + "-" + underlayName
	if cl, ok := log.(interface{ Cleanup(func()) }); ok {
		cl.Cleanup(func() {
			if panicking() {
				c.failed.Store(true)
			}
			if err := c.Close(); err != nil {
				log.Logf("cluster: %v", err)
			}
		})
	}
	if err := c.start(); err != nil {
		c.failed.Store(true)
		if cerr := c.Close(); cerr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
		}
		return nil, err
	}
	c.started = true
	return c, nil
}

// claim picks the prefix and the directory and writes the registry record, before anything
// else is made, so that a sweep by a concurrent or later run knows who owns what.
func (c *Cluster) claim() error {
	for attempt := 0; ; attempt++ {
		prefix := c.opts.Prefix
		if prefix == "" {
			p, err := randomPrefix()
			if err != nil {
				return err
			}
			prefix = p
		}
		dir := c.opts.Dir
		if dir == "" {
			d, err := os.MkdirTemp("", "weft-e2e-"+prefix+"-")
			if err != nil {
				return fmt.Errorf("cluster: creating its directory: %w", err)
			}
			dir = d
		} else if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cluster: creating its directory: %w", err)
		}
		r, err := newRecord(prefix, dir, c.opts.Keep)
		if err != nil {
			return fmt.Errorf("cluster: %w", err)
		}
		err = claimRecord(r)
		if err == nil {
			c.prefix, c.dir = prefix, dir
			return nil
		}
		if c.opts.Dir == "" {
			_ = os.RemoveAll(dir) // empty and ours
		}
		if c.opts.Prefix != "" || attempt == 5 {
			return fmt.Errorf("cluster: prefix %s is taken (tear it down with Teardown or pick another): %w", prefix, err)
		}
	}
}

func (c *Cluster) start() error {
	if err := ip("netns", "add", c.ul); err != nil {
		return fmt.Errorf("cluster %s: creating the underlay: %w", c.prefix, err)
	}
	// Before any device exists, so that the bridge and its ports inherit it.
	if err := enableIPv6(c.ul); err != nil {
		return fmt.Errorf("cluster %s: creating the underlay: %w", c.prefix, err)
	}
	for _, args := range [][]string{
		{"-n", c.ul, "link", "set", "lo", "up"},
		{"-n", c.ul, "link", "add", underlayBridge, "address", underlayBridgeMAC, "type", "bridge"},
		{"-n", c.ul, "addr", "add", fmt.Sprintf("%s/%d", UnderlayGateway, underlayBits), "dev", underlayBridge},
		// nodad: usable at once (etcd binds to it below), not tentative for a second.
		{"-n", c.ul, "addr", "add", fmt.Sprintf("%s/%d", UnderlayGateway6, underlayBits6), "dev", underlayBridge, "nodad"},
		{"-n", c.ul, "link", "set", underlayBridge, "up"},
	} {
		if err := ip(args...); err != nil {
			return fmt.Errorf("cluster %s: creating the underlay: %w", c.prefix, err)
		}
	}

	if len(c.opts.EtcdCommand) > 0 {
		if err := c.startEtcdMembers(); err != nil {
			return err
		}
	} else {
		e, err := startEtcdIn(c.ul, filepath.Join(c.dir, "etcd"))
		if err != nil {
			return fmt.Errorf("cluster %s: %w", c.prefix, err)
		}
		c.etcd = e
	}

	client, err := c.newEtcdClient(c.EtcdEndpoints())
	if err != nil {
		return fmt.Errorf("cluster %s: %w", c.prefix, err)
	}
	c.client = client

	// Etcd processes may still be starting, or electing a leader: retry until the first
	// answer.
	key := c.opts.EtcdPrefix + "/config"
	deadline := time.Now().Add(etcdReadyTimeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = client.Put(ctx, key, c.opts.NetConf)
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster %s: writing the network config to %s: %w", c.prefix, key, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.log.Logf("cluster %s: underlay %s, etcd on %s, files in %s", c.prefix, c.ul, strings.Join(c.EtcdEndpoints(), ","), c.dir)
	return nil
}

// newEtcdClient makes a client of the cluster's etcd at the endpoints. The harness runs in
// the host namespace, where the underlay's addresses do not exist: its connections are made
// from inside the underlay.
func (c *Cluster) newEtcdClient(endpoints []string) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: etcdOpTimeout,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
				return dialIn(ctx, c.ul, "tcp", addr)
			}),
			// An etcd member that was down is dialled again within 50 ms, not gRPC's
			// default second, so that the harness times the member, not its own backoff.
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: etcdOpTimeout,
			}),
		},
	})
	if err != nil {
		return nil, fmt.Errorf("creating etcd client for %v: %w", endpoints, err)
	}
	return client, nil
}

// procAttr is how the harness starts long-lived processes (weftd, an etcd command): in a
// process group of their own, so that a Ctrl-C meant for the demo reaches only the demo;
// killed with this process unless the cluster is kept, so that a test binary killed by its
// timeout does not leave daemons running until the next sweep.
func (c *Cluster) procAttr() *syscall.SysProcAttr {
	if c.opts.Keep {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// panicking reports whether the caller runs because of a panic: deferred calls and the
// testing package's cleanups run on top of the panicking frames until the panic is over.
func panicking() bool {
	pcs := make([]uintptr, 128)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		f, more := frames.Next()
		if f.Function == "runtime.gopanic" {
			return true
		}
		if !more {
			return false
		}
	}
}

// Prefix is the cluster's name prefix, which Teardown takes.
func (c *Cluster) Prefix() string { return c.prefix }

// Dir is the cluster's directory.
func (c *Cluster) Dir() string { return c.dir }

// Underlay is the name of the underlay network namespace.
func (c *Cluster) Underlay() string { return c.ul }

// Etcd is a client of the cluster's etcd, usable from this process. Do not close it.
func (c *Cluster) Etcd() *clientv3.Client { return c.client }

// EtcdPrefix is the etcd key prefix the cluster's nodes use.
func (c *Cluster) EtcdPrefix() string { return c.opts.EtcdPrefix }

// Nodes returns the cluster's nodes in the order they were added.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Node(nil), c.nodes...)
}

// Pods returns the cluster's pods that have not been deleted, in the order they were added.
func (c *Cluster) Pods() []*Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	var pods []*Pod
	for _, p := range c.pods {
		if !p.deleted {
			pods = append(pods, p)
		}
	}
	return pods
}

// Leases reads every subnet lease in etcd.
func (c *Cluster) Leases() ([]subnet.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), etcdOpTimeout)
	defer cancel()
	dir := c.opts.EtcdPrefix + "/subnets/"
	resp, err := c.client.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing leases under %s: %w", dir, err)
	}
	leases := make([]subnet.Lease, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		key := strings.TrimPrefix(string(kv.Key), dir)
		sn, sn6, err := subnet.ParseKey(key)
		if err != nil {
			return nil, fmt.Errorf("lease key %s: %w", kv.Key, err)
		}
		l := subnet.Lease{Subnet: sn, IPv6Subnet: sn6}
		if err := l.Attrs.UnmarshalJSON(kv.Value); err != nil {
			return nil, fmt.Errorf("lease %s: %w", kv.Key, err)
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// DeleteLease deletes the lease of an IPv4 subnet from etcd, as an operator removing a dead
// node would. It is an error if there was no such lease.
func (c *Cluster) DeleteLease(sn netip.Prefix) error {
	ctx, cancel := context.WithTimeout(context.Background(), etcdOpTimeout)
	defer cancel()
	key := c.opts.EtcdPrefix + "/subnets/" + subnet.Key(sn.Masked(), netip.Prefix{})
	resp, err := c.client.Delete(ctx, key)
	if err != nil {
		return fmt.Errorf("deleting lease %s: %w", key, err)
	}
	if resp.Deleted != 1 {
		return fmt.Errorf("deleting lease %s: no such key", key)
	}
	return nil
}

// Close removes the cluster: pods (with a CNI DEL), weftd processes (SIGTERM, then SIGKILL),
// etcd, every namespace and the registry record; and the directory, unless the Logger
// reports a failure, in which case it says where the logs are. With Keep it only lets go of
// the cluster, which keeps running. Calling it again returns the first result.
func (c *Cluster) Close() error {
	c.closeOnce.Do(func() { c.closeErr = c.close() })
	return c.closeErr
}

func (c *Cluster) close() error {
	var errs []error
	if c.opts.Keep && c.started {
		if c.client != nil {
			_ = c.client.Close() // only this process's connection
		}
		c.log.Logf("cluster %s: left running; files in %s", c.prefix, c.dir)
		return nil
	}

	failed := c.failed.Load()
	if f, ok := c.log.(interface{ Failed() bool }); ok && f.Failed() {
		failed = true
	}

	for _, p := range c.Pods() {
		if err := p.Delete(); err != nil {
			errs = append(errs, err)
		}
	}
	// In parallel: each may take its stop timeout.
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Go(func() { n.stopForClose() })
	}
	wg.Wait()
	if c.client != nil {
		_ = c.client.Close() // errors only report the context Close cancels
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
	for _, m := range c.members {
		m.kill()
	}
	if c.prefix != "" {
		if err := teardown(c.prefix, false); err != nil {
			errs = append(errs, err)
		}
	}

	if failed {
		var logs []string
		for _, n := range c.Nodes() {
			logs = append(logs, n.LogPath)
		}
		msg := fmt.Sprintf("cluster %s: kept its files for the failure: %s", c.prefix, c.dir)
		if c.opts.Weftd != "" && len(logs) > 0 {
			msg += " (weftd logs: " + strings.Join(logs, " ") + ")"
		}
		c.log.Logf("%s", msg)
	} else if c.dir != "" && c.opts.Dir == "" {
		if err := os.RemoveAll(c.dir); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", c.dir, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("closing cluster %s: %w", c.prefix, err)
	}
	return nil
}
