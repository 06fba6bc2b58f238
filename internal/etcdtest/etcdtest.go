// Package etcdtest runs a real, embedded etcd server inside the test process so
// tests can exercise code against genuine etcd semantics (revisions, watches,
// compaction, TLS client authentication, restarts) without an external binary.
package etcdtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/logutil"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

const (
	memberName = "etcdtest"
	// A single member normally elects itself well under a second; the margin
	// is for slow, loaded CI machines.
	readyTimeout = 15 * time.Second
	// Starting can fail if a port we reserved (or freed by Stop) is grabbed
	// by someone else for a moment, so a few attempts are allowed.
	startAttempts = 5
	startBackoff  = 200 * time.Millisecond
)

// Options tune a Server. The zero value is a plain-HTTP server.
type Options struct {
	TLS bool // serve clients over TLS and require client certificates signed by the server's CA
}

// Server is an embedded etcd member owned by one test.
type Server struct {
	dataDir string
	name    string
	peerURL url.URL
	pki     *pki // nil unless Options.TLS
	// initialCluster names the peers of a member of StartCluster, itself included; "" for
	// a member alone.
	initialCluster string

	mu sync.Mutex
	// clientURL starts with port 0 and is pinned to the real port after the
	// first start, so Restart comes back where existing clients expect it.
	clientURL url.URL
	etcd      *embed.Etcd // nil while stopped
	closers   []func()

	// stopping is set while a deliberate Stop closes etcd, so the logger can
	// drop the errors etcd reports for its own listeners being closed.
	stopping atomic.Bool
}

// Start starts an embedded etcd in a fresh data directory on 127.0.0.1 with
// random ports and stops it (and closes its clients) at test cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()

	s := &Server{dataDir: t.TempDir(), name: memberName}
	scheme := "http"
	if opts.TLS {
		p, err := newPKI(t.TempDir())
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		s.pki = p
		scheme = "https"
	}

	// The peer URL goes into the initial-cluster string, which must be known
	// before etcd binds anything, so port 0 cannot be used for it.
	peerAddr, err := reserveLoopbackAddr()
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s.peerURL = url.URL{Scheme: "http", Host: peerAddr}
	s.clientURL = url.URL{Scheme: scheme, Host: "127.0.0.1:0"}

	t.Cleanup(s.cleanup)
	s.start(t)
	return s
}

// StartCluster starts size embedded etcd members forming one cluster, each as Start makes
// one (plain HTTP), and waits until every one serves; each is stopped at test cleanup. A
// member stopped with Stop leaves the others serving while a majority of them runs; without
// one they have no leader, and refuse what needs one (writes, linearizable reads, watches
// that require a leader). Restart brings a member back on its data.
func StartCluster(t testing.TB, size int) []*Server {
	t.Helper()
	members := make([]*Server, size)
	peers := make([]string, size)
	for i := range members {
		peerAddr, err := reserveLoopbackAddr()
		if err != nil {
			t.Fatalf("etcdtest: %v", err)
		}
		s := &Server{dataDir: t.TempDir(), name: fmt.Sprintf("%s%d", memberName, i+1),
			peerURL: url.URL{Scheme: "http", Host: peerAddr}, clientURL: url.URL{Scheme: "http", Host: "127.0.0.1:0"}}
		t.Cleanup(s.cleanup)
		members[i], peers[i] = s, s.name+"="+s.peerURL.String()
	}
	// Together: each is ready only once a majority of them runs.
	errs := make([]error, size)
	var wg sync.WaitGroup
	for i, s := range members {
		s.initialCluster = strings.Join(peers, ",")
		wg.Go(func() { errs[i] = s.tryStart() })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	return members
}

// ClusterClient returns a new clientv3.Client connected to every member of a cluster that
// StartCluster made, closed automatically at test cleanup.
func ClusterClient(t testing.TB, members []*Server) *clientv3.Client {
	t.Helper()
	var eps []string
	for _, s := range members {
		eps = append(eps, s.Endpoints()...)
	}
	return members[0].clientFor(t, eps)
}

// Endpoints returns the client URLs, for clients built by the caller.
func (s *Server) Endpoints() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []string{s.clientURL.String()}
}

// Client returns a new clientv3.Client connected to the server, closed
// automatically at test cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return s.clientFor(t, s.Endpoints())
}

// clientFor is Client for other endpoints that lead to this server (such as
// a relay in front of it), with the same TLS material and cleanup.
func (s *Server) clientFor(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()

	// The default client logger is at info level and chats about every
	// retry while the server is stopped; only errors are worth reading.
	lg, err := logutil.CreateDefaultZapLogger(zap.ErrorLevel)
	if err != nil {
		t.Fatalf("etcdtest: creating client logger: %v", err)
	}
	cfg := clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      lg,
	}
	if s.pki != nil {
		cfg.TLS = s.pki.clientTLS.Clone()
	}
	c, err := clientv3.New(cfg)
	if err != nil {
		t.Fatalf("etcdtest: creating client for %v: %v", cfg.Endpoints, err)
	}

	// Registered both on t and on the server, because t may be a subtest
	// that ends before the server's own cleanup runs.
	closeClient := sync.OnceFunc(func() {
		// The error only reports the context being canceled by Close itself.
		_ = c.Close()
	})
	s.mu.Lock()
	s.closers = append(s.closers, closeClient)
	s.mu.Unlock()
	t.Cleanup(closeClient)
	return c
}

// CAFile is the PEM CA certificate that signed the server and client
// certificates. Empty unless Options.TLS.
func (s *Server) CAFile() string {
	if s.pki == nil {
		return ""
	}
	return s.pki.caFile
}

// ClientCertFile is a PEM client certificate accepted by the server. Empty
// unless Options.TLS.
func (s *Server) ClientCertFile() string {
	if s.pki == nil {
		return ""
	}
	return s.pki.clientCertFile
}

// ClientKeyFile is the PEM key for ClientCertFile. Empty unless
// Options.TLS.
func (s *Server) ClientKeyFile() string {
	if s.pki == nil {
		return ""
	}
	return s.pki.clientKeyFile
}

// Stop stops the server but keeps its data directory; calling it on a
// stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop()
}

// Restart starts the server again (stopping it first if needed) with the
// same data directory and the same client URL, so existing clients reconnect
// on their own.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.start(t)
}

// Backup copies the data directory, stopping the server for the copy and starting it again:
// a consistent file-level backup of the store as it is now, for RestoreBackup.
func (s *Server) Backup(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "backup")
	s.stop()
	if err := os.CopyFS(dir, os.DirFS(s.dataDir)); err != nil {
		t.Fatalf("etcdtest: backing up %s: %v", s.dataDir, err)
	}
	s.start(t)
	return dir
}

// RestoreBackup replaces the store with a Backup and restarts the server on it, as an
// operator restoring etcd does: everything written since is gone, and the revision goes back.
func (s *Server) RestoreBackup(t testing.TB, backup string) {
	t.Helper()
	s.stop()
	if err := os.RemoveAll(s.dataDir); err != nil {
		t.Fatalf("etcdtest: removing %s: %v", s.dataDir, err)
	}
	if err := os.CopyFS(s.dataDir, os.DirFS(backup)); err != nil {
		t.Fatalf("etcdtest: restoring %s: %v", backup, err)
	}
	s.start(t)
}

// RotatePKI restarts a TLS server with new TLS material: a new CA, and server and client
// certificates it signed, in new files (CAFile and the others name them from now on; the old
// files stay as they were), as an operator replacing a CA does. Clients holding the old
// material can no longer connect; the clients Client made before keep the old material.
func (s *Server) RotatePKI(t testing.TB) {
	t.Helper()
	if s.pki == nil {
		t.Fatal("etcdtest: RotatePKI on a server without TLS")
	}
	p, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	s.stop()
	s.mu.Lock()
	s.pki = p
	s.mu.Unlock()
	s.start(t)
}

// Compact physically compacts the key space up to the current revision, so
// a watch resuming from an older revision gets ErrCompacted.
func (s *Server) Compact(t testing.TB) {
	t.Helper()

	s.mu.Lock()
	e := s.etcd
	s.mu.Unlock()
	if e == nil {
		t.Fatalf("etcdtest: Compact called on a stopped server")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev := e.Server.KV().Rev()
	// Physical makes the call wait until the old revisions are really gone,
	// so the test does not race the background compaction.
	_, err := e.Server.Compact(ctx, &pb.CompactionRequest{Revision: rev, Physical: true})
	// Already compacted at this revision (nothing written since) is exactly
	// the state the caller asked for.
	if err != nil && !errors.Is(err, mvcc.ErrCompacted) {
		t.Fatalf("etcdtest: compacting at revision %d: %v", rev, err)
	}
}

func (s *Server) start(t testing.TB) {
	t.Helper()
	if err := s.tryStart(); err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
}

func (s *Server) tryStart() error {
	s.stopping.Store(false)
	cfg, err := s.config()
	if err != nil {
		return err
	}
	var e *embed.Etcd
	for attempt := 1; ; attempt++ {
		e, err = embed.StartEtcd(cfg)
		if err == nil || attempt == startAttempts {
			break
		}
		time.Sleep(startBackoff)
		// StartEtcd has taken ownership of the old config (logger and all).
		if cfg, err = s.config(); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("starting embedded etcd %s (data dir %s, client %s, peer %s): %w",
			s.name, cfg.Dir, cfg.ListenClientUrls[0].String(), cfg.ListenPeerUrls[0].String(), err)
	}
	if err := waitReady(e); err != nil {
		e.Close()
		return fmt.Errorf("etcd %s: %w", s.name, err)
	}

	s.mu.Lock()
	s.etcd = e
	s.clientURL.Host = e.Clients[0].Addr().String()
	s.mu.Unlock()
	return nil
}

func waitReady(e *embed.Etcd) error {
	timer := time.NewTimer(readyTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("embedded etcd failed before becoming ready: %w", err)
	case <-timer.C:
		return fmt.Errorf("embedded etcd not ready after %v", readyTimeout)
	}
}

// config builds a fresh embed.Config per start, because StartEtcd mutates and
// keeps parts of the one it is given (logger, feature gates).
func (s *Server) config() (*embed.Config, error) {
	s.mu.Lock()
	clientURL := s.clientURL
	s.mu.Unlock()

	cfg := embed.NewConfig()
	cfg.Name = s.name
	// A restart finds the WAL in this directory and rejoins from it, so
	// ClusterState and InitialCluster are ignored then.
	cfg.Dir = s.dataDir

	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.LogOutputs = []string{"stderr"}
	// Same logger etcd would build from the three settings above, except
	// that it hides the stack-traced errors etcd logs on every normal Close.
	lg, err := logutil.CreateDefaultZapLogger(zap.ErrorLevel)
	if err != nil {
		return nil, fmt.Errorf("creating etcd logger: %w", err)
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg.WithOptions(zap.WrapCore(
		func(c zapcore.Core) zapcore.Core { return shutdownFilter{Core: c, stopping: &s.stopping} },
	)))

	cfg.ListenPeerUrls = []url.URL{s.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{s.peerURL}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.InitialCluster = s.initialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	}

	// Test data is throwaway and fsync dominates the latency of every write.
	cfg.UnsafeNoFsync = true
	// Short ticks let the lone member elect itself in tens of milliseconds
	// instead of up to a second. With elections that quick, etcd's storage
	// version check can run before the first backend commit and log a
	// spurious "missing term information" error; committing every 10ms
	// keeps the commit ahead of it.
	cfg.TickMs, cfg.ElectionMs = 20, 200
	cfg.BackendBatchInterval = 10 * time.Millisecond
	// The HTTP/JSON gateway dials the configured listen address, which is
	// port 0 on the first start, and tests talk gRPC anyway.
	cfg.EnableGRPCGateway = false

	if s.pki != nil {
		cfg.ClientTLSInfo = transport.TLSInfo{
			CertFile:       s.pki.serverCertFile,
			KeyFile:        s.pki.serverKeyFile,
			TrustedCAFile:  s.pki.caFile,
			ClientCertAuth: true,
		}
	}
	return cfg, nil
}

func (s *Server) stop() {
	s.mu.Lock()
	e := s.etcd
	s.etcd = nil
	s.mu.Unlock()
	if e != nil {
		s.stopping.Store(true)
		e.Close()
	}
}

// serveFailedMsg is what etcd v3.7 logs, at error level with a stack trace,
// for each listener and server it closes itself during Close.
const serveFailedMsg = "setting up serving from embedded etcd failed."

// shutdownFilter drops serveFailedMsg while the server is being stopped on
// purpose; the same message during a start or a crash still gets through.
type shutdownFilter struct {
	zapcore.Core
	stopping *atomic.Bool
}

func (f shutdownFilter) With(fields []zapcore.Field) zapcore.Core {
	return shutdownFilter{Core: f.Core.With(fields), stopping: f.stopping}
}

func (f shutdownFilter) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if ent.Message == serveFailedMsg && f.stopping.Load() {
		return ce
	}
	return f.Core.Check(ent, ce)
}

func (s *Server) cleanup() {
	s.mu.Lock()
	closers := s.closers
	s.closers = nil
	s.mu.Unlock()
	// Clients go first: a graceful server stop waits for their open streams
	// (e.g. watches) up to the request timeout, which would slow every test.
	for _, closeClient := range closers {
		closeClient()
	}
	s.stop()
}

// reserveLoopbackAddr finds a currently free loopback port. Another process
// could take it before etcd binds it; start retries cover that rare case.
func reserveLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("reserving a loopback port: %w", err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", fmt.Errorf("releasing reserved port %s: %w", addr, err)
	}
	return addr, nil
}

// pki is the TLS material of one TLS server: a throwaway CA, a server
// certificate and a client certificate, as PEM files plus the ready-made
// client config.
type pki struct {
	caFile         string
	serverCertFile string
	serverKeyFile  string
	clientCertFile string
	clientKeyFile  string
	clientTLS      *tls.Config
}

func newPKI(dir string) (*pki, error) {
	// Backdated so a clock a little behind does not reject fresh certificates.
	notBefore := time.Now().Add(-time.Hour)
	notAfter := notBefore.Add(48 * time.Hour)

	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("self-signing CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("parsing CA certificate: %w", err)
	}

	serverCert, serverKey, err := issue(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcdtest server"},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:    []string{"localhost"},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing server certificate: %w", err)
	}
	clientCert, clientKey, err := issue(ca, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "etcdtest client"},
		NotBefore:   notBefore,
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, fmt.Errorf("issuing client certificate: %w", err)
	}

	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	p := &pki{
		caFile:         filepath.Join(dir, "ca.pem"),
		serverCertFile: filepath.Join(dir, "server.pem"),
		serverKeyFile:  filepath.Join(dir, "server-key.pem"),
		clientCertFile: filepath.Join(dir, "client.pem"),
		clientKeyFile:  filepath.Join(dir, "client-key.pem"),
	}
	for name, data := range map[string][]byte{
		p.caFile:         caPEM,
		p.serverCertFile: serverCert,
		p.serverKeyFile:  serverKey,
		p.clientCertFile: clientCert,
		p.clientKeyFile:  clientKey,
	} {
		if err := os.WriteFile(name, data, 0o600); err != nil {
			return nil, fmt.Errorf("writing TLS file: %w", err)
		}
	}

	pair, err := tls.X509KeyPair(clientCert, clientKey)
	if err != nil {
		return nil, fmt.Errorf("loading client key pair: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	p.clientTLS = &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{pair},
		MinVersion:   tls.VersionTLS12,
	}
	return p, nil
}

// issue signs tmpl with the CA for a new key and returns certificate and key
// as PEM. The serial number is left to x509, which picks a random one.
func issue(ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("generating key: %w", err)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("signing certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding key: %w", err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, nil
}
