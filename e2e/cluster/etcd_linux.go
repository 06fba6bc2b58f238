package cluster

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

const (
	// EtcdURL is where the nodes find etcd: the underlay bridge's address.
	EtcdURL = "http://" + UnderlayGateway + ":2379"
	// EtcdURL6 is the same etcd at the underlay bridge's IPv6 address, for nodes that are to
	// reach it over IPv6.
	EtcdURL6 = "http://[" + UnderlayGateway6 + "]:2379"
	// The peer listener is needed by etcd even as a single member; on the underlay's
	// loopback nothing else can reach it.
	etcdPeerURL = "http://127.0.0.1:2380"
	// etcdReadyTimeout is generous because a single member usually elects itself in well
	// under a second, but CI machines with two busy cores can be slow.
	etcdReadyTimeout = 20 * time.Second
)

// etcdConfig is the configuration of the cluster's one etcd member, with its data and its
// log in dir. It is built fresh for every start because embed keeps and mutates it.
func etcdConfig(dir string) (*embed.Config, error) {
	var clients []url.URL
	for _, u := range []string{EtcdURL, EtcdURL6} {
		client, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("parsing etcd client URL %s: %w", u, err)
		}
		clients = append(clients, *client)
	}
	peer, err := url.Parse(etcdPeerURL)
	if err != nil {
		return nil, fmt.Errorf("parsing etcd peer URL %s: %w", etcdPeerURL, err)
	}
	cfg := embed.NewConfig()
	cfg.Name = "weft-e2e"
	cfg.Dir = filepath.Join(dir, "data")
	cfg.ListenClientUrls = clients
	cfg.AdvertiseClientUrls = clients
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
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

// startEtcdIn starts an embedded etcd whose listeners are created inside the named network
// namespace, then waits until it serves.
func startEtcdIn(ns, dir string) (*embed.Etcd, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating etcd directory %s: %w", dir, err)
	}
	cfg, err := etcdConfig(dir)
	if err != nil {
		return nil, err
	}
	var e *embed.Etcd
	err = inNetns(ns, func() error {
		// StartEtcd opens every listener before it returns; the serving goroutines it
		// leaves behind only accept on them, so they may run on any thread.
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

// ServeEtcd runs the cluster's etcd in this process, in this process's network namespace,
// until ctx ends. It is what a process given as Options.EtcdCommand calls after `ip netns
// exec` put it in the underlay namespace: the demo's --keep uses it so that etcd outlives
// the demo process.
func ServeEtcd(ctx context.Context, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating etcd directory %s: %w", dir, err)
	}
	cfg, err := etcdConfig(dir)
	if err != nil {
		return err
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("starting etcd on %s (log %s): %w", EtcdURL, cfg.LogOutputs[0], err)
	}
	defer e.Close()
	if err := waitEtcd(e); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd stopped serving: %w", err)
	}
}
