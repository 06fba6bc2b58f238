package etcd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// clientTLS is the TLS config of weftd's etcd client. The client certificate and the CA
// bundle are read from their files at every handshake, not once: cert-manager and kubeadm
// renew them in place, and a connection made after the renewal must use the new ones
// without a restart of weftd (established connections keep theirs). The files are read once
// here too, so that missing or bad files stop start-up with an error naming them.
func clientTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if certFile != "" {
		if _, err := loadPair(certFile, keyFile); err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return loadPair(certFile, keyFile)
		}
	}
	if caFile == "" {
		return cfg, nil // the system's roots
	}
	if _, err := loadPool(caFile); err != nil {
		return nil, err
	}
	// Verification is done here, against the CA bundle as the file holds it now, in place of
	// the handshake's own (which would use a pool fixed at start-up); it checks the same:
	// the chain to the bundle, and the server's name or address.
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		pool, err := loadPool(caFile)
		if err != nil {
			return err
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

// loadPair reads a client certificate and its key.
func loadPair(certFile, keyFile string) (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("etcd: client certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &pair, nil
}

// loadPool reads a PEM CA bundle.
func loadPool(caFile string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("etcd: CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("etcd: CA bundle %s holds no PEM certificate", caFile)
	}
	return pool, nil
}
