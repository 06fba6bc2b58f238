package ctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// datastoreFlags say where the leases are, with weftd's flag names and defaults.
type datastoreFlags struct {
	etcd       etcd.ClientConfig
	prefix     string
	kube       bool
	kubeconfig string
}

func (d *datastoreFlags) addFlags(fs *flag.FlagSet) {
	d.etcd.Endpoints = []string{"http://127.0.0.1:4001", "http://127.0.0.1:2379"}
	d.prefix = etcd.DefaultPrefix
	fs.Var((*listValue)(&d.etcd.Endpoints), "etcd-endpoints", "comma-separated etcd endpoints")
	fs.StringVar(&d.prefix, "etcd-prefix", d.prefix, "etcd prefix of the network config and leases")
	fs.StringVar(&d.etcd.CAFile, "etcd-cafile", "", "CA bundle that signed etcd's certificate")
	fs.StringVar(&d.etcd.CertFile, "etcd-certfile", "", "client certificate for etcd")
	fs.StringVar(&d.etcd.KeyFile, "etcd-keyfile", "", "key of the client certificate for etcd")
	fs.StringVar(&d.etcd.Username, "etcd-username", "", "etcd user name")
	fs.StringVar(&d.etcd.Password, "etcd-password", "", "etcd password")
	fs.BoolVar(&d.kube, "kube-subnet-mgr", false, "read the leases from the Kubernetes API (not yet supported)")
	fs.StringVar(&d.kubeconfig, "kubeconfig-file", "", "kubeconfig for --kube-subnet-mgr")
}

// Entry is one key of the datastore's lease directory: a lease, or why it cannot be read.
type Entry struct {
	Key   string
	Lease subnet.Lease // Expiration set when the datastore knows it
	Err   error
}

// datastore is what weftctl reads from where the leases live.
type datastore interface {
	Config(ctx context.Context) (*subnet.Config, error)
	Leases(ctx context.Context) ([]Entry, error)
	Close()
}

func (d *datastoreFlags) open() (datastore, error) {
	if d.kube {
		// subnet/kube is being written (issue 5); until weftd runs on it, so does weftctl.
		return nil, usageError{errors.New("--kube-subnet-mgr: Kubernetes mode is not supported by weftctl yet; read the leases from etcd with --etcd-endpoints")}
	}
	if d.kubeconfig != "" {
		return nil, usageError{fmt.Errorf("--kubeconfig-file=%q: only with --kube-subnet-mgr, which is not supported yet", d.kubeconfig)}
	}
	if len(d.etcd.Endpoints) == 0 {
		return nil, usageError{errors.New("--etcd-endpoints: none given")}
	}
	cfg := d.etcd
	cfg.DialTimeout = 5 * time.Second
	cli, err := etcd.NewClient(cfg)
	if err != nil {
		return nil, usageError{fmt.Errorf("--etcd-endpoints=%s: %w", strings.Join(d.etcd.Endpoints, ","), err)}
	}
	prefix := strings.TrimSuffix(d.prefix, "/")
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

// listValue is a comma-separated list that replaces its default when set.
type listValue []string

func (l *listValue) String() string { return strings.Join(*l, ",") }

func (l *listValue) Set(s string) error {
	*l = nil
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
