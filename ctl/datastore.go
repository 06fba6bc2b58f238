package ctl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
	"github.com/weftnet/weft/subnet/kube"
)

// datastoreFlags are weftd's flags that say where the leases are: etcd's, and Kubernetes
// mode's.
func datastoreFlags() []string {
	return []string{"etcd-endpoints", "etcd-prefix", "etcd-cafile", "etcd-certfile", "etcd-keyfile", "etcd-username", "etcd-password",
		"kube-subnet-mgr", "kubeconfig-file", "kube-api-url", "kube-annotation-prefix", "net-config-path"}
}

// Entry is one lease of the datastore, or why it cannot be read.
type Entry struct {
	// Key is the lease's etcd key, or in Kubernetes mode the name of the Node that holds it.
	Key   string
	Lease subnet.Lease // Expiration set when the datastore knows it
	Err   error
}

// datastore is what weftctl reads from where the leases live.
type datastore interface {
	Config(ctx context.Context) (*subnet.Config, error)
	Leases(ctx context.Context) ([]Entry, error)
	// NodePublicIPs are the addresses the node's annotations give in place of --public-ip
	// and --public-ipv6 (Kubernetes mode; invalid where there are none).
	NodePublicIPs(ctx context.Context) (v4, v6 netip.Addr, err error)
	Close()
}

// openStore opens the datastore cfg names, as weftd does: etcd, or the Kubernetes API with
// --kube-subnet-mgr.
func openStore(cfg daemon.Config) (datastore, error) {
	if cfg.KubeSubnetMgr {
		return &kubeStore{cfg: cfg.ManagerConfig()}, nil
	}
	if len(cfg.EtcdEndpoints) == 0 {
		return nil, usageError{errors.New("--etcd-endpoints: none given")}
	}
	cc := cfg.EtcdClient()
	cc.DialTimeout = 5 * time.Second
	cli, err := etcd.NewClient(cc)
	if err != nil {
		return nil, usageError{fmt.Errorf("--etcd-endpoints=%s: %w", strings.Join(cfg.EtcdEndpoints, ","), err)}
	}
	prefix := strings.TrimSuffix(cfg.EtcdPrefix, "/")
	if prefix == "" {
		prefix = etcd.DefaultPrefix
	}
	return &etcdStore{cli: cli, mgr: etcd.New(cli, etcd.Options{Prefix: prefix}), prefix: prefix}, nil
}

// etcdStore reads the leases straight from etcd rather than through the Manager's watch:
// one request, malformed keys shown rather than skipped, and each key's etcd lease tells
// when it expires.
type etcdStore struct {
	cli    *clientv3.Client
	mgr    *etcd.Manager
	prefix string
}

func (s *etcdStore) Close() { _ = s.cli.Close() }

func (s *etcdStore) NodePublicIPs(context.Context) (v4, v6 netip.Addr, err error) { return v4, v6, nil }

func (s *etcdStore) Config(ctx context.Context) (*subnet.Config, error) {
	cfg, err := s.mgr.GetConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the network config at --etcd-endpoints=%s: %w", strings.Join(s.cli.Endpoints(), ","), err)
	}
	return cfg, nil
}

func (s *etcdStore) Leases(ctx context.Context) ([]Entry, error) {
	dir := s.prefix + "/subnets/"
	resp, err := s.cli.Get(ctx, dir, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("listing %s at --etcd-endpoints=%s: %w", dir, strings.Join(s.cli.Endpoints(), ","), err)
	}
	now := time.Now()
	expiry := map[clientv3.LeaseID]time.Time{} // a node's keys share its etcd lease
	entries := make([]Entry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		e := Entry{Key: string(kv.Key)}
		sn, sn6, err := subnet.ParseKey(strings.TrimPrefix(e.Key, dir))
		if err != nil {
			e.Err = err
			entries = append(entries, e)
			continue
		}
		e.Lease = subnet.Lease{Subnet: sn, IPv6Subnet: sn6}
		if err := e.Lease.Attrs.UnmarshalJSON(kv.Value); err != nil {
			e.Err = err
		}
		if id := clientv3.LeaseID(kv.Lease); id != clientv3.NoLease {
			exp, seen := expiry[id]
			if !seen {
				// Unknown, not an error, when it cannot be read: the listing matters more.
				if ttl, err := s.cli.TimeToLive(ctx, id); err == nil && ttl.TTL >= 0 {
					exp = now.Add(time.Duration(ttl.TTL) * time.Second).Truncate(time.Second)
				}
				expiry[id] = exp
			}
			e.Lease.Expiration = exp
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// kubeStore reads the network config from its file (--net-config-path) and the leases from
// the Node objects, with one list (kube.List), as the operator's kubeconfig or weftd's
// service account allows.
type kubeStore struct {
	cfg     kube.Config
	read    bool
	net     *subnet.Config
	entries []Entry
	err     error
}

func (s *kubeStore) Close() {}

// list reads the config and the leases once, for Config and Leases both.
func (s *kubeStore) list(ctx context.Context) {
	if s.read {
		return
	}
	s.read = true
	net, leases, err := kube.List(ctx, s.cfg)
	if err != nil {
		s.err = fmt.Errorf("Kubernetes mode (--kube-subnet-mgr, --net-config-path=%s): %w", s.cfg.NetConfPath, err)
		return
	}
	s.net = net
	for _, l := range leases {
		s.entries = append(s.entries, Entry{Key: l.Node, Lease: l.Lease, Err: l.Err})
	}
}

func (s *kubeStore) Config(ctx context.Context) (*subnet.Config, error) {
	s.list(ctx)
	return s.net, s.err
}

func (s *kubeStore) Leases(ctx context.Context) ([]Entry, error) {
	s.list(ctx)
	return s.entries, s.err
}

func (s *kubeStore) NodePublicIPs(ctx context.Context) (v4, v6 netip.Addr, err error) {
	m, err := kube.New(s.cfg)
	if err != nil {
		return v4, v6, err
	}
	return m.NodePublicIPs(ctx)
}
