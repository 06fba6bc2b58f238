package etcdtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// nopLogger silences clients whose failures are the point of the test.
func nopLogger() *zap.Logger { return zap.NewNop() }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func putGet(t *testing.T, c *clientv3.Client, key, val string) {
	t.Helper()
	ctx := ctxTimeout(t, 5*time.Second)
	if _, err := c.Put(ctx, key, val); err != nil {
		t.Fatalf("put %q: %v", key, err)
	}
	mustGet(t, c, key, val)
}

func mustGet(t *testing.T, c *clientv3.Client, key, want string) {
	t.Helper()
	resp, err := c.Get(ctxTimeout(t, 10*time.Second), key)
	if err != nil {
		t.Fatalf("get %q: %v", key, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		t.Fatalf("get %q = %v, want one value %q", key, resp.Kvs, want)
	}
}

func TestPlainRoundTrip(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})

	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "http://127.0.0.1:") || strings.HasSuffix(eps[0], ":0") {
		t.Fatalf("Endpoints() = %v, want one http://127.0.0.1:<port>", eps)
	}
	putGet(t, s.Client(t), "plain", "value")
}

func TestTLS(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{TLS: true})

	eps := s.Endpoints()
	if len(eps) != 1 || !strings.HasPrefix(eps[0], "https://127.0.0.1:") {
		t.Fatalf("Endpoints() = %v, want one https://127.0.0.1:<port>", eps)
	}
	putGet(t, s.Client(t), "secure", "value")

	t.Run("files build a working client", func(t *testing.T) {
		pair, err := tls.LoadX509KeyPair(s.ClientCertFile(), s.ClientKeyFile())
		if err != nil {
			t.Fatal(err)
		}
		c := newTLSClient(t, s, []tls.Certificate{pair})
		mustGet(t, c, "secure", "value")
	})

	t.Run("client without certificate is refused", func(t *testing.T) {
		c := newTLSClient(t, s, nil)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.Get(ctx, "secure")
		if err == nil {
			t.Fatal("get without a client certificate succeeded, want refusal")
		}
		t.Logf("refused as expected: %v", err)

		// The Get above only shows that something failed; the handshake
		// shows it is the missing certificate.
		conn, err := tls.Dial("tcp", strings.TrimPrefix(s.Endpoints()[0], "https://"),
			&tls.Config{RootCAs: caPool(t, s), MinVersion: tls.VersionTLS13})
		if err != nil {
			t.Fatalf("TLS dial: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
		// TLS 1.3 reports the server's verdict on the client's certificate
		// on the first read after the handshake. crypto/tls exposes that
		// alert only as text for non-QUIC connections.
		if _, err := conn.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "certificate required") {
			t.Fatalf("read without client certificate: %v, want the certificate required alert", err)
		}
	})
}

// newTLSClient trusts the server's CA but presents only the given
// certificates, to check what the server accepts.
func newTLSClient(t *testing.T, s *Server, certs []tls.Certificate) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{
		Endpoints:   s.Endpoints(),
		DialTimeout: time.Second,
		TLS:         &tls.Config{RootCAs: caPool(t, s), Certificates: certs, MinVersion: tls.VersionTLS12},
		Logger:      nopLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func caPool(t *testing.T, s *Server) *x509.CertPool {
	t.Helper()
	caPEM, err := os.ReadFile(s.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", s.CAFile())
	}
	return pool
}

func TestStopRestartKeepsData(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	c := s.Client(t)
	putGet(t, c, "durable", "before")
	before := s.Endpoints()

	s.Stop(t)
	s.Stop(t) // must be harmless

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, "durable"); err == nil {
		t.Fatal("get succeeded while the server was stopped")
	}

	s.Restart(t)
	if after := s.Endpoints(); after[0] != before[0] {
		t.Fatalf("endpoint changed across restart: %v -> %v", before, after)
	}
	// The same client, never told about the restart.
	mustGet(t, c, "durable", "before")
	putGet(t, c, "durable", "after")
}

// TestClusterQuorum: a three-member cluster serves with one member stopped, refuses writes
// with two stopped, and serves again, its data whole, once one of them is back.
func TestClusterQuorum(t *testing.T) {
	t.Parallel()
	members := StartCluster(t, 3)
	c := ClusterClient(t, members)
	putGet(t, c, "k", "three")

	members[0].Stop(t)
	putGet(t, c, "k", "two")
	members[1].Stop(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	// A write without quorum times out, but its proposal may sit in the surviving member's
	// log and commit once a member returns (etcd reports such a write as indeterminate), so
	// it goes to a key of its own: "k" must keep what was written with quorum.
	if _, err := c.Put(ctx, "pending", "one"); err == nil {
		t.Fatal("a write succeeded with two of three members stopped")
	}

	members[1].Restart(t)
	mustGet(t, c, "k", "two")
	getCtx := ctxTimeout(t, 10*time.Second)
	resp, err := c.Get(getCtx, "pending")
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) > 1 || len(resp.Kvs) == 1 && string(resp.Kvs[0].Value) != "one" {
		t.Fatalf("get \"pending\" = %v, want nothing or the timed-out write's \"one\"", resp.Kvs)
	}
	putGet(t, c, "k", "two again")
}

func TestCompactBreaksOldWatch(t *testing.T) {
	t.Parallel()
	s := Start(t, Options{})
	c := s.Client(t)

	ctx := ctxTimeout(t, 5*time.Second)
	first, err := c.Put(ctx, "k", "v1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, "k", "v2"); err != nil {
		t.Fatal(err)
	}
	s.Compact(t)
	s.Compact(t) // nothing new to compact: must not fail

	wch := c.Watch(clientv3.WithRequireLeader(ctx), "k", clientv3.WithRev(first.Header.Revision))
	select {
	case resp, ok := <-wch:
		if !ok {
			t.Fatal("watch channel closed without a response")
		}
		if !errors.Is(resp.Err(), rpctypes.ErrCompacted) {
			t.Fatalf("watch from compacted revision %d: Err() = %v, want %v",
				first.Header.Revision, resp.Err(), rpctypes.ErrCompacted)
		}
	case <-ctx.Done():
		t.Fatal("no watch response before timeout")
	}
}
