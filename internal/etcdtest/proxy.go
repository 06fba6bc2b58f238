package etcdtest

import (
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Proxy is a TCP relay in front of the server whose link can be cut and restored, so a
// test can take one client off the network while others go on changing the data.
type Proxy struct {
	ln     net.Listener
	target string
	scheme string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// Proxy starts a relay to the server, closed at test cleanup.
func (s *Server) Proxy(t testing.TB) *Proxy {
	t.Helper()
	target, err := url.Parse(s.Endpoints()[0])
	if err != nil {
		t.Fatalf("etcdtest: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("etcdtest: proxy listen: %v", err)
	}
	p := &Proxy{ln: ln, target: target.Host, scheme: target.Scheme, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
	})
	go p.serve()
	return p
}

// Client returns a client that reaches the server through the proxy.
func (p *Proxy) Client(t testing.TB, s *Server) *clientv3.Client {
	t.Helper()
	return s.clientFor(t, []string{p.scheme + "://" + p.ln.Addr().String()})
}

// Cut closes every relayed connection and refuses new ones until Restore.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// Restore lets connections through again.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) serve() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.relay(in)
	}
}

func (p *Proxy) relay(in net.Conn) {
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		in.Close()
		out.Close()
		return
	}
	p.conns[in], p.conns[out] = true, true
	p.mu.Unlock()
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		dst.Close()
		src.Close()
	}
	wg.Add(2)
	go pipe(in, out)
	go pipe(out, in)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, in)
	delete(p.conns, out)
	p.mu.Unlock()
}
