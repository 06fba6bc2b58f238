package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"go.etcd.io/etcd/client/pkg/v3/tlsutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// clientTLS is the TLS config of weftd's etcd client, with the client certificate and the CA
// bundle read from their files at every handshake, not once: cert-manager and kubeadm renew
// them in place, and a connection made after the renewal must use the new ones without a
// restart of weftd (established connections keep theirs). etcd's transport.TLSInfo already
// reads the certificate at every handshake and checks every file once, here, so that missing
// or bad ones stop start-up naming them; the CA bundle it reads once, so the verification
// against it is done here instead.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	info := transport.TLSInfo{CertFile: certFile, KeyFile: keyFile, TrustedCAFile: caFile}
	cfg, err := info.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("etcd: TLS config (ca %q, cert %q, key %q): %w", caFile, certFile, keyFile, err)
	}
	if caFile == "" {
		return cfg, nil // the system's roots
	}
	// The handshake's own verification would use the pool read at start-up; this one checks
	// the same (the chain to the bundle, the server's name or address) against the bundle as
	// the file holds it now.
	cfg.RootCAs, cfg.InsecureSkipVerify = nil, true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		pool, err := tlsutil.NewCertPool([]string{caFile})
		if err != nil {
			return fmt.Errorf("etcd: CA bundle %s: %w", caFile, err)
		}
		if len(cs.PeerCertificates) == 0 {
			return errors.New("etcd: the server sent no certificate")
		}
		opts := x509.VerifyOptions{Roots: pool, DNSName: cs.ServerName, Intermediates: x509.NewCertPool(),
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		for _, c := range cs.PeerCertificates[1:] {
			opts.Intermediates.AddCert(c)
		}
		if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
			return fmt.Errorf("etcd: server certificate (CA bundle %s): %w", caFile, err)
		}
		return nil
	}
	return cfg, nil
}
