package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
)

const (
	// EtcdURL is where the nodes find etcd: the underlay bridge's address. With several
	// members (Options.EtcdMembers) it is the first member's; EtcdEndpoints lists them all.
	EtcdURL = "http://" + UnderlayGateway + ":2379"
	// EtcdURL6 is the same etcd at the underlay bridge's IPv6 address, for nodes that are to
	// reach it over IPv6.
	EtcdURL6 = "http://[" + UnderlayGateway6 + "]:2379"
	// The peer listener is needed by etcd even as a single member; on the underlay's
	// loopback nothing else can reach it.
	etcdPeerURL = "http://127.0.0.1:2380"
	// etcdClientPort and etcdPeerPort are where each member of an etcd of several listens,
	// on its own underlay address.
	etcdClientPort, etcdPeerPort = 2379, 2380
	// maxEtcdMembers: the members take the underlay's hosts from 1 (the gateway) up, below
	// the nodes' (firstNodeHost+1 up).
	maxEtcdMembers = firstNodeHost - 1
	// etcdMemberFile, in the directory of an etcd member run as a process, describes the
	// member to ServeEtcd (an etcdMember as JSON).
	etcdMemberFile = "member.json"
	// etcdReadyTimeout is generous because a single member usually elects itself in well
	// under a second, but CI machines with two busy cores can be slow.
	etcdReadyTimeout = 20 * time.Second
)

// etcdMember is what tells one member of the cluster's etcd from the others.
type etcdMember struct {
	Name       string
	ClientURLs []string // the first is the one the nodes are given
	PeerURL    string
	// InitialCluster names every member's peer URL, as etcd's --initial-cluster does. A
	// member started again on its data goes by what its data says instead.
	InitialCluster string
}

// soleEtcdMember is the cluster's etcd when it has one member: it serves EtcdURL and
// EtcdURL6.
func soleEtcdMember() etcdMember {
	const name = "weft-e2e"
	return etcdMember{Name: name, ClientURLs: []string{EtcdURL, EtcdURL6}, PeerURL: etcdPeerURL,
		InitialCluster: name + "=" + etcdPeerURL}
}

// etcdMembersOf are the n members of an etcd of several: the i-th (from 1), etcd<i>, serves
// its clients and its peers on the underlay's host i, 192.0.2.i. The first thus serves
// EtcdURL, and EtcdURL6 too, as a sole member does.
func etcdMembersOf(n int) []etcdMember {
	members := make([]etcdMember, n)
	peers := make([]string, n)
	for i := range members {
		ip := underlayIP(i + 1)
		m := etcdMember{
			Name:       fmt.Sprintf("etcd%d", i+1),
			ClientURLs: []string{"http://" + netip.AddrPortFrom(ip, etcdClientPort).String()},
			PeerURL:    "http://" + netip.AddrPortFrom(ip, etcdPeerPort).String(),
		}
		if i == 0 {
			m.ClientURLs = append(m.ClientURLs, EtcdURL6)
		}
		members[i], peers[i] = m, m.Name+"="+m.PeerURL
	}
	for i := range members {
		members[i].InitialCluster = strings.Join(peers, ",")
	}
	return members
}

// etcdConfig is the configuration of the member m of the cluster's etcd, with its data and
// its log in dir. It is built fresh for every start because embed keeps and mutates it.
func etcdConfig(dir string, m etcdMember) (*embed.Config, error) {
	var clients []url.URL
	for _, u := range m.ClientURLs {
		client, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("parsing etcd client URL %s: %w", u, err)
		}
		clients = append(clients, *client)
	}
	peer, err := url.Parse(m.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("parsing etcd peer URL %s: %w", m.PeerURL, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = clients
	cfg.AdvertiseClientUrls = clients
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = m.InitialCluster
	if host, err := netip.ParseAddr(peer.Hostname()); err == nil && !host.IsLoopback() {
		// Members of several share the underlay namespace: dialling its peers from its own
		// address, rather than from the one the kernel picks, is what lets Isolate cut one
		// member off from the others by address.
		gate, ok := cfg.ServerFeatureGate.(interface{ Set(string) error })
		if !ok {
			return nil, fmt.Errorf("etcd member %s: its feature gate cannot be set", m.Name)
		}
		if err := gate.Set("SetMemberLocalAddr=true"); err != nil {
			return nil, fmt.Errorf("etcd member %s: %w", m.Name, err)
		}
	}
	// Its log goes to a file so that a failing test can point at it without etcd's
	// chatter about its own shutdown filling every test's output.
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{filepath.Join(dir, "etcd.log")}
	// The data is thrown away with the cluster; fsync would only slow every lease write.
	cfg.UnsafeNoFsync = true
	cfg.TickMs, cfg.ElectionMs = 20, 200
	cfg.BackendBatchInterval = 10 * time.Millisecond
	// The gateway dials the client URL from whatever thread runs it, which need not be in
	// the underlay namespace; nothing here speaks etcd's JSON API anyway.
	cfg.EnableGRPCGateway = false
	return cfg, nil
}

// startEtcdIn starts the sole member of an embedded etcd whose listeners are created inside
// the named network namespace, then waits until it serves.
func startEtcdIn(ns, dir string) (*embed.Etcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating etcd directory %s: %w", dir, err)
	}
	cfg, err := etcdConfig(dir, soleEtcdMember())
	if err != nil {
		return nil, err
	}
	var e *embed.Etcd
	err = InNetns(ns, func() error {
		// StartEtcd opens every listener before it returns; the serving goroutines it
		// leaves behind only accept on them, so they may run on any thread. A member
		// with peers could not run so: it dials them from whatever thread, outside the
		// namespace (see Options.EtcdMembers).
		var err error
		e, err = embed.StartEtcd(cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd on %s in namespace %s (log %s): %w",
			EtcdURL, ns, cfg.LogOutputs[0], err)
	}
	if err := waitEtcd(e); err != nil {
		e.Close()
		return nil, fmt.Errorf("%w (log %s)", err, cfg.LogOutputs[0])
	}
	return e, nil
}

func waitEtcd(e *embed.Etcd) error {
	timer := time.NewTimer(etcdReadyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedded etcd failed before it was ready: %w", err)
	case <-timer.C:
		return fmt.Errorf("embedded etcd not ready after %v", etcdReadyTimeout)
	}
}

// ServeEtcd runs a member of the cluster's etcd in this process, in this process's network
// namespace, until ctx ends: the member that dir, its directory as the harness made it,
// describes. It is what a process given as Options.EtcdCommand calls after `ip netns exec`
// put it in the underlay namespace: the demo's --keep uses it so that etcd outlives the
// demo process, and tests so that they can stop and start members.
func ServeEtcd(ctx context.Context, dir string) error {
	data, err := os.ReadFile(filepath.Join(dir, etcdMemberFile))
	if err != nil {
		return fmt.Errorf("reading the etcd member to serve: %w", err)
	}
	var m etcdMember
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("reading the etcd member to serve from %s: %w", filepath.Join(dir, etcdMemberFile), err)
	}
	cfg, err := etcdConfig(dir, m)
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd member %s on %s (log %s): %w", m.Name, m.ClientURLs[0], cfg.LogOutputs[0], err)
	}
	defer e.Close()
	// A member started again waits here for a majority of its peers: only then is it ready.
	select {
	case <-ctx.Done():
		return nil
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s failed before it was ready: %w", m.Name, err)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s stopped serving: %w", m.Name, err)
	}
}

// EtcdMember is one member of the cluster's etcd run as a process of its own
// (Options.EtcdCommand), which a test can stop and start again.
type EtcdMember struct {
	c *Cluster

	Name    string // etcd's name for it
	URL     string // its IPv4 client URL, one of EtcdEndpoints
	PeerURL string // where the other members reach it
	Dir     string // its data, etcd's log (etcd.log) and etcdMemberFile
	LogPath string // the process's output, every run appended

	mu   sync.Mutex
	proc *process // the current or last run
	runs int
}

// startEtcdMembers starts Options.EtcdCommand in the underlay namespace once for each member
// of the cluster's etcd, on the member's own underlay address. Each runs in a session of its
// own when the cluster is kept, so that it survives this process. They elect a leader among
// themselves; the caller's first request waits for it.
func (c *Cluster) startEtcdMembers() error {
	members := []etcdMember{soleEtcdMember()}
	if c.opts.EtcdMembers > 1 {
		members = etcdMembersOf(c.opts.EtcdMembers)
	}
	for i, em := range members {
		file := "etcd"
		if len(members) > 1 {
			file = em.Name
		}
		m := &EtcdMember{c: c, Name: em.Name, URL: em.ClientURLs[0], PeerURL: em.PeerURL,
			Dir: filepath.Join(c.dir, file), LogPath: filepath.Join(c.dir, file+".out")}
		if i > 0 { // the first is on the gateway's address
			addr := fmt.Sprintf("%s/%d", underlayIP(i+1), underlayBits)
			if err := ip("-n", c.ul, "addr", "add", addr, "dev", underlayBridge); err != nil {
				return fmt.Errorf("cluster %s: etcd member %s: %w", c.prefix, m.Name, err)
			}
		}
		data, err := json.Marshal(em)
		if err != nil {
			return fmt.Errorf("cluster %s: etcd member %s: %w", c.prefix, m.Name, err)
		}
		if err := os.MkdirAll(m.Dir, 0o700); err != nil {
			return fmt.Errorf("cluster %s: creating %s: %w", c.prefix, m.Dir, err)
		}
		if err := os.WriteFile(filepath.Join(m.Dir, etcdMemberFile), data, 0o600); err != nil {
			return fmt.Errorf("cluster %s: etcd member %s: %w", c.prefix, m.Name, err)
		}
		c.members = append(c.members, m)
		if err := m.start(); err != nil {
			return fmt.Errorf("cluster %s: %w", c.prefix, err)
		}
	}
	return nil
}

// start starts the member's process on its directory, without waiting for it to serve.
func (m *EtcdMember) start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && !m.proc.exited() {
		return fmt.Errorf("etcd member %s is running already (pid %d)", m.Name, m.proc.cmd.Process.Pid)
	}
	m.runs++
	p, err := m.c.spawn(m.c.ul, m.LogPath, m.runs, nil, append(slices.Clone(m.c.opts.EtcdCommand), m.Dir))
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	m.proc = p
	return nil
}

// Start starts the stopped member again on its data, and waits until it answers a
// linearizable read: it has caught up with the others, which needs a majority of the
// members running with it.
func (m *EtcdMember) Start() error {
	if err := m.start(); err != nil {
		return err
	}
	cli, err := m.c.newEtcdClient([]string{m.URL})
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	defer cli.Close()
	start := time.Now()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = cli.Get(ctx, m.c.opts.EtcdPrefix+"/config", clientv3.WithCountOnly())
		cancel()
		if err == nil {
			m.c.log.Logf("cluster %s: etcd member %s serves again, %v after it started", m.c.prefix, m.Name,
				time.Since(start).Round(time.Millisecond))
			return nil
		}
		m.mu.Lock()
		p := m.proc
		m.mu.Unlock()
		if p.exited() || time.Since(start) > etcdReadyTimeout {
			return fmt.Errorf("etcd member %s: not serving %v after it started (%v; exited: %v); log %s, etcd's %s:\n%s",
				m.Name, time.Since(start).Round(time.Millisecond), err, p.exited(), m.LogPath,
				filepath.Join(m.Dir, "etcd.log"), logTail(m.LogPath, logTailLines))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop sends sig to the member and waits for it to exit: SIGKILL crashes it, SIGTERM stops
// it as etcd stops (a leader hands its leadership over first). If it has not exited after
// 15 s it is killed.
func (m *EtcdMember) Stop(sig syscall.Signal) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	killed, err := p.stop(sig, stopTimeout)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	if killed {
		return fmt.Errorf("etcd member %s did not exit within %v of %v; killed", m.Name, stopTimeout, sig)
	}
	return nil
}

// Running reports whether the member's process runs.
func (m *EtcdMember) Running() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.proc != nil && !m.proc.exited()
}

// kill ends the member's process at once, for Close.
func (m *EtcdMember) kill() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.proc != nil && m.proc.cmd.Process != nil {
		_ = m.proc.cmd.Process.Kill() // destroying the underlay would do it too
	}
}

// EtcdMembers returns the members of the cluster's etcd when they run as processes
// (Options.EtcdCommand), the one serving EtcdURL first; nil when etcd runs in this process.
func (c *Cluster) EtcdMembers() []*EtcdMember { return slices.Clone(c.members) }

// EtcdEndpoints are the client URLs of the members of the cluster's etcd, which the nodes
// are given: EtcdURL alone unless Options.EtcdMembers asked for more.
func (c *Cluster) EtcdEndpoints() []string {
	if len(c.members) == 0 {
		return []string{EtcdURL}
	}
	urls := make([]string, len(c.members))
	for i, m := range c.members {
		urls[i] = m.URL
	}
	return urls
}

// EtcdLeader returns the member that leads the cluster's etcd, as the running members tell;
// it is an error if none says it leads (an election under way, or no majority to elect one).
func (c *Cluster) EtcdLeader() (*EtcdMember, error) {
	if len(c.members) == 0 {
		return nil, fmt.Errorf("cluster %s: its etcd runs in this process: no members to ask (Options.EtcdCommand)", c.prefix)
	}
	var errs []error
	for _, m := range c.members {
		if !m.Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		st, err := c.client.Status(ctx, m.URL)
		cancel()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
		case st.Leader != 0 && st.Leader == st.Header.MemberId:
			return m, nil
		}
	}
	err := errors.Join(errs...)
	if err == nil {
		err = errors.New("no running member leads")
	}
	return nil, fmt.Errorf("cluster %s: finding the etcd leader: %w", c.prefix, err)
}

// Isolate cuts the member off from the other members (on) or ends the cut (off): an nft
// table in the underlay drops every packet from or to its peer port on its own address,
// while its clients still reach it. A leader so cut keeps its clients and loses its
// followers: the others elect a new leader, and it steps down with no leader to follow.
func (m *EtcdMember) Isolate(on bool) error {
	u, err := url.Parse(m.PeerURL)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", m.Name, err)
	}
	addr, err := netip.ParseAddr(u.Hostname())
	if err != nil || addr.IsLoopback() {
		return fmt.Errorf("etcd member %s: peer URL %s: a sole member has no peers to be cut from", m.Name, m.PeerURL)
	}
	table := "weft-isolate-" + m.Name
	cmds := [][]string{{"nft", "delete", "table", "ip", table}}
	if on {
		a, port := addr.String(), u.Port()
		cmds = [][]string{
			{"nft", "add", "table", "ip", table},
			{"nft", "add", "chain", "ip", table, "out", "{ type filter hook output priority 0 ; }"},
			{"nft", "add", "rule", "ip", table, "out", "ip", "saddr", a, "tcp", "sport", port, "drop"},
			{"nft", "add", "rule", "ip", table, "out", "ip", "saddr", a, "tcp", "dport", port, "drop"},
			{"nft", "add", "rule", "ip", table, "out", "ip", "daddr", a, "tcp", "dport", port, "drop"},
			{"nft", "add", "rule", "ip", table, "out", "ip", "daddr", a, "tcp", "sport", port, "drop"},
		}
	}
	for _, c := range cmds {
		if _, err := run("ip", netnsExecArgs(m.c.ul, c...)...); err != nil {
			return fmt.Errorf("etcd member %s: %w", m.Name, err)
		}
	}
	return nil
}

// Signal sends sig to the member's process and returns at once: SIGSTOP freezes it (it
// keeps its connections and answers nothing), SIGCONT lets it go on.
func (m *EtcdMember) Signal(sig syscall.Signal) error {
	m.mu.Lock()
	p := m.proc
	m.mu.Unlock()
	if p == nil || p.exited() {
		return fmt.Errorf("etcd member %s is not running", m.Name)
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("etcd member %s: sending %v: %w", m.Name, sig, err)
	}
	return nil
}
