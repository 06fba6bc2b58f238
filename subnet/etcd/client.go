// Package etcd is the subnet.Manager on etcd v3, with flannel's key layout: the network
// config at <prefix>/config and one key per lease at <prefix>/subnets/<subnet key>, each
// bound to an etcd lease (24 h by default) that the node keeps alive.
//
// Every write is a transaction that compares revisions, so concurrent nodes never take the
// same subnet and a node never overwrites a lease that someone else holds or just changed.
package etcd

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// ClientConfig is how to reach etcd; the fields match flanneld's --etcd-* flags.
type ClientConfig struct {
	Endpoints   []string // --etcd-endpoints
	CAFile      string   // --etcd-cafile
	CertFile    string   // --etcd-certfile
	KeyFile     string   // --etcd-keyfile
	Username    string   // --etcd-username
	Password    string   // --etcd-password
	DialTimeout time.Duration
}

// NewClient connects to etcd. Connections are made lazily: an unreachable etcd is an error of
// the first request, not of NewClient.
func NewClient(c ClientConfig) (*clientv3.Client, error) {
	if len(c.Endpoints) == 0 {
		return nil, errors.New("etcd: no endpoints")
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("etcd: a client certificate needs both a cert file (%q) and a key file (%q)", c.CertFile, c.KeyFile)
	}
	var tlsCfg *tls.Config
	if c.CAFile != "" || c.CertFile != "" {
		var err error
		if tlsCfg, err = clientTLS(c.CAFile, c.CertFile, c.KeyFile); err != nil {
			return nil, err
		}
	}
	timeout := c.DialTimeout
	if timeout == 0 {
		timeout = 5 * time.Second
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   c.Endpoints,
		TLS:         tlsCfg,
		Username:    c.Username,
		Password:    c.Password,
		DialTimeout: timeout,
		// A path to etcd that silently drops packets (a partition, not a refused connection)
		// leaves the connection "ready" for ever unless something talks on it: HTTP/2 pings
		// every 10 s (etcd refuses them more often than every 5 s), 5 s to answer, make such a
		// connection fail within 15 s, so that Check and /readyz say so.
		DialKeepAliveTime:    10 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
		PermitWithoutStream:  true,
		// The client's own retries are noise in the daemon's log: weft logs what matters.
		Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd: connect to %v: %w", c.Endpoints, err)
	}
	return cli, nil
}
