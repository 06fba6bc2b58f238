// Package kubetest runs a real kube-apiserver for tests: the binary that
// tools/kube/install-kube.sh builds, against an embedded etcd
// (internal/etcdtest), on 127.0.0.1 with a random port. Authorization is RBAC;
// a static token file holds an administrator (group system:masters) and an
// identity with no permission at all; service-account tokens can be had from
// the TokenRequest API, bound to a Secret when a test must revoke them. Tests
// skip when the binary is missing. Options move the server elsewhere: another
// address and port, the caller's etcd, a wrapper command that runs it inside a
// network namespace (the e2e cluster's underlay).
package kubetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/internal/etcdtest"
)

// EnvBinary names the environment variable holding the path of the
// kube-apiserver binary. Without it the binary is looked for in .cache/kube/bin
// of the enclosing checkout, where `make test` puts it.
const EnvBinary = "WEFT_KUBE_APISERVER"

// Users of the token file.
const (
	AdminUser      = "weft-test-admin"      // group system:masters: may do anything
	RestrictedUser = "weft-test-restricted" // in no group: may do only what a binding grants
)

const (
	// kube-apiserver serves /readyz about 3 s after it starts on an idle
	// machine; the margin is for loaded CI machines that build meanwhile.
	readyTimeout = 90 * time.Second
	// opTimeout bounds each request made for a test (a token, a Secret).
	opTimeout = 30 * time.Second
	// A port reserved and released for the server can be taken by someone else
	// before the server binds it; a few attempts cover that.
	startAttempts = 3
	// etcdPrefix keeps the API server's objects apart from anything else a test
	// might store in the same etcd (flannel's /coreos.com/network, say).
	etcdPrefix = "/weft-kubetest/registry"
)

// Server is a kube-apiserver owned by one test.
type Server struct {
	bin     string
	dir     string
	addr    netip.Addr
	etcd    *etcdtest.Server
	port    int
	caPEM   []byte
	admin   string // bearer tokens
	limited string
	logPath string
	extra   []string // flags of the caller

	etcdServers []string // Options.EtcdServers; empty when etcd is the server's own
	etcdPrefix  string
	wrapper     []string // Options.Command
	dial        func(ctx context.Context, network, address string) (net.Conn, error)

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// Binary returns the kube-apiserver binary to run: $WEFT_KUBE_APISERVER, else
// .cache/kube/bin/kube-apiserver in this directory or the nearest parent that
// has one.
func Binary() (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s: %w", EnvBinary, err)
		}
		return p, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding kube-apiserver: %w", err)
	}
	for {
		p := filepath.Join(dir, ".cache", "kube", "bin", "kube-apiserver")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no kube-apiserver: set $%s or run `make deps` (tools/kube/install-kube.sh .cache/kube/bin)", EnvBinary)
		}
		dir = parent
	}
}

// Options tune a Server. The zero value serves on 127.0.0.1.
type Options struct {
	// Addr is the address to serve on, for clients in other network namespaces
	// (the e2e nodes); default 127.0.0.1.
	Addr netip.Addr
	// Args are added to the server's flags (--feature-gates=..., say).
	Args []string

	// Port is the port to serve on; default a free one. A fixed port is for a
	// server that clients must find without being told, and for an Addr that
	// exists only where Command runs the server: a free port cannot be probed
	// for there.
	Port int
	// EtcdServers, if set, is the etcd the server stores its objects in, as
	// the server reaches it (where Command runs it), instead of an etcd of its
	// own: the e2e cluster's, which exists only inside its underlay namespace.
	EtcdServers []string
	// EtcdPrefix is the server's key prefix in etcd, default
	// /weft-kubetest/registry; set one apart from what else the etcd holds.
	EtcdPrefix string
	// Command, if set, is put in front of the server's command line: a wrapper
	// that runs it elsewhere, such as `ip netns exec <ns>` for a server inside
	// a network namespace. The wrapper must exec the server in place (ip netns
	// exec does), so that Stop's kill reaches the server and not the wrapper,
	// and so that the kill-on-death of sysProcAttr, which an exec keeps, holds
	// for the server.
	Command []string
	// Dial, if set, is how clients in this process connect to the server,
	// whose address may exist only inside a network namespace. Every config
	// from Config carries it; a kubeconfig written from one for a process that
	// reaches the server directly simply leaves it out.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
}

// Start starts a kube-apiserver, with an etcd of its own unless
// Options.EtcdServers names one, and stops both at test cleanup. It skips the test when there is no binary.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Skipf("kubetest: %v", err)
	}
	var etcd *etcdtest.Server
	if len(opts.EtcdServers) == 0 {
		etcd = etcdtest.Start(t, etcdtest.Options{})
	}
	s, err := newServer(bin, t.TempDir(), etcd, opts)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("kubetest: end of the kube-apiserver log (%s):\n%s", s.logPath, s.logTail(4000))
		}
	})
	if err := s.launch(opts.Port); err != nil {
		t.Fatalf("kubetest: %v\n%s", err, s.logTail(4000))
	}
	return s
}

// Launch starts a kube-apiserver for a program that is not a test (the
// benchmark harness): as Start does, but on the caller's etcd
// (Options.EtcdServers is required: etcdtest's server lives only as long as a
// test), with its files in dir, and errors returned instead of reported. The
// caller stops it with Close.
func Launch(dir string, opts Options) (*Server, error) {
	if len(opts.EtcdServers) == 0 {
		return nil, fmt.Errorf("kubetest: Launch needs Options.EtcdServers")
	}
	bin, err := Binary()
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	s, err := newServer(bin, dir, nil, opts)
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	if err := s.launch(opts.Port); err != nil {
		return nil, fmt.Errorf("kubetest: %w (log %s)", err, s.logPath)
	}
	return s, nil
}

// Close kills the API server as Stop does; for servers made by Launch.
func (s *Server) Close() { s.stop() }

// newServer prepares a server's files in dir: its PKI and its token file.
func newServer(bin, dir string, etcd *etcdtest.Server, opts Options) (*Server, error) {
	s := &Server{bin: bin, dir: dir, etcd: etcd, admin: token(), limited: token(), addr: opts.Addr, extra: opts.Args,
		etcdServers: append([]string(nil), opts.EtcdServers...), etcdPrefix: opts.EtcdPrefix,
		wrapper: append([]string(nil), opts.Command...), dial: opts.Dial}
	if !s.addr.IsValid() {
		s.addr = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	if s.etcdPrefix == "" {
		s.etcdPrefix = etcdPrefix
	}
	s.logPath = filepath.Join(s.dir, "kube-apiserver.log")
	var err error
	if s.caPEM, err = writePKI(s.dir, s.addr); err != nil {
		return nil, err
	}
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n", s.admin, AdminUser, AdminUser, s.limited, RestrictedUser, RestrictedUser)
	if err := os.WriteFile(filepath.Join(s.dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, fmt.Errorf("writing the token file: %w", err)
	}
	return s, nil
}

// launch starts the server on port (0: a free one, with a few attempts when
// the port picked is taken meanwhile).
func (s *Server) launch(port int) error {
	var err error
	for attempt := 1; ; attempt++ {
		s.port = port
		if s.port == 0 {
			if s.port, err = freePort(s.addr); err != nil {
				return err
			}
		}
		err = s.start()
		// Another attempt only helps a port that was picked here: a fixed one
		// that is taken stays taken.
		if err == nil || port != 0 || attempt == startAttempts || !strings.Contains(s.logTail(2000), "address already in use") {
			return err
		}
	}
}

// URL is the server's address, https://127.0.0.1:<port> by default.
func (s *Server) URL() string {
	return "https://" + netip.AddrPortFrom(s.addr, uint16(s.port)).String()
}

// Admin returns a client config with every permission.
func (s *Server) Admin() *rest.Config { return s.Config(s.admin) }

// Restricted returns a client config of RestrictedUser, who may do nothing that
// a binding does not grant.
func (s *Server) Restricted() *rest.Config { return s.Config(s.limited) }

// Config returns a client config that authenticates with a bearer token.
func (s *Server) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            s.URL(),
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caPEM},
		// Tests make bursts of requests; client-go's default of 5 per second
		// would make them slow, not more real.
		QPS:   1000,
		Burst: 1000,
		Dial:  s.dial,
	}
}

// Stop kills the API server, as a crash or the loss of its machine would,
// leaving etcd and its data alone: clients lose their connections without a
// goodbye. (A graceful stop waits up to a minute for open watches to end, which
// tests have no time for.) Stopping a stopped server does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stop()
}

// Freeze stops the API server's process (SIGSTOP) and leaves every connection open: a hung
// server, or a path that drops every packet, looks so to clients. It returns once every
// thread of the server has stopped. Thaw undoes it; Stop and the test's end kill a frozen
// server as any other.
func (s *Server) Freeze(t testing.TB) {
	t.Helper()
	if _, _, err := freezeSignals(); err != nil {
		t.Skip(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
}

// Thaw lets a frozen API server run again (SIGCONT).
func (s *Server) Thaw(t testing.TB) {
	t.Helper()
	_, cont, err := freezeSignals()
	if err != nil {
		t.Skip(err)
	}
	if _, err := s.signal(cont); err != nil {
		t.Fatal(err)
	}
}

// Pause is Freeze for servers made by Launch, the error returned.
func (s *Server) Pause() error {
	stop, _, err := freezeSignals()
	if err != nil {
		return err
	}
	pid, err := s.signal(stop)
	if err != nil {
		return err
	}
	// The kernel stops a process's threads one by one as each next runs, after the signal
	// is sent: meanwhile one that runs on another CPU answers requests, as a CI machine under
	// load showed (a probe answered after Freeze returned).
	return waitStopped(pid, 10*time.Second)
}

// Resume is Thaw for servers made by Launch, the error returned.
func (s *Server) Resume() error {
	_, cont, err := freezeSignals()
	if err != nil {
		return err
	}
	_, err = s.signal(cont)
	return err
}

// signal sends sig to the API server's process, and returns its pid.
func (s *Server) signal(sig os.Signal) (int, error) {
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		return 0, fmt.Errorf("kubetest: %v to a stopped API server", sig)
	}
	if err := cmd.Process.Signal(sig); err != nil {
		return 0, fmt.Errorf("kubetest: %v to the API server (pid %d): %w", sig, cmd.Process.Pid, err)
	}
	return cmd.Process.Pid, nil
}

// Restart starts the API server again on the same port and etcd, stopping it
// first if it runs; clients reconnect by themselves.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.Relaunch(); err != nil {
		t.Fatal(err)
	}
}

// Relaunch is Restart for servers made by Launch, the error returned: the
// server is down after one.
func (s *Server) Relaunch() error {
	s.stop()
	if err := s.start(); err != nil {
		return fmt.Errorf("kubetest: restart: %w\n%s", err, s.logTail(4000))
	}
	return nil
}

func (s *Server) args() []string {
	servers := s.etcdServers
	if s.etcd != nil {
		// Asked each time: the own etcd's port is only known once it runs.
		servers = s.etcd.Endpoints()
	}
	return append([]string{
		"--etcd-servers=" + strings.Join(servers, ","),
		"--etcd-prefix=" + s.etcdPrefix,
		"--bind-address=" + s.addr.String(),
		"--advertise-address=" + s.addr.String(),
		"--secure-port=" + strconv.Itoa(s.port),
		"--cert-dir=" + filepath.Join(s.dir, "certs"),
		"--tls-cert-file=" + filepath.Join(s.dir, "serving.pem"),
		"--tls-private-key-file=" + filepath.Join(s.dir, "serving-key.pem"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(s.dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(s.dir, "sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--authorization-mode=RBAC",
		"--token-auth-file=" + filepath.Join(s.dir, "tokens.csv"),
		// Nothing here runs endpoints of the kubernetes service; reconciling
		// them would only write to etcd every few seconds.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
	}, s.extra...)
}

// start runs the binary and waits until it serves /readyz or exits.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("kube-apiserver log: %w", err)
	}
	defer logf.Close() // the child has its own descriptor
	argv := append(append(append([]string(nil), s.wrapper...), s.bin), s.args()...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", strings.Join(argv[:len(s.wrapper)+1], " "), err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait() // how it ended is in its log
		close(exited)
	}()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	if err := s.waitReady(exited); err != nil {
		s.stop()
		return err
	}
	return nil
}

func (s *Server) waitReady(exited <-chan struct{}) error {
	cs, err := kubernetes.NewForConfig(s.Admin())
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		_, last = cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(rctx)
		rcancel()
		if last == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("kube-apiserver exited before it was ready (log %s)", s.logPath)
		case <-ctx.Done():
			return fmt.Errorf("kube-apiserver not ready after %v: %w", readyTimeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (s *Server) stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill() // fails only when it has exited already
	<-exited
}

// logTail returns the last n bytes of the server's log.
func (s *Server) logTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}

// freePort finds a port of addr that is free now.
func freePort(addr netip.Addr) (int, error) {
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		return 0, fmt.Errorf("reserving a port on %s: %w", addr, err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("releasing port %d: %w", port, err)
	}
	return port, nil
}
