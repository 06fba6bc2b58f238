package etcdtest

import (
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Proxy is a TCP relay in front of the server whose link can be cut and restored, so a
// test can take one client off the network while others go on changing the data, or frozen
// and thawed, so that the client sees a server that takes its bytes and answers nothing, as a
// stopped (SIGSTOP) etcd or a path that drops packets does.
type Proxy struct {
	ln     net.Listener
	target string
	scheme string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
	// thawed is closed while bytes flow; while frozen it is open, and the relays hold what
	// they read until it closes.
	thawed chan struct{}
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
	p := &Proxy{ln: ln, target: target.Host, scheme: target.Scheme, conns: map[net.Conn]bool{}, thawed: make(chan struct{})}
	close(p.thawed)
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
	return s.clientFor(t, []string{p.Endpoint()})
}

// Endpoint is the proxy's client URL, for clients built by the caller.
func (p *Proxy) Endpoint() string { return p.scheme + "://" + p.ln.Addr().String() }

// Cut closes every relayed connection and refuses new ones until Restore. It ends a Freeze.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
	p.thawLocked()
}

// Freeze stops relaying, in both directions, until Thaw: connections stay open and new ones
// are taken, but no byte passes.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.thawed:
		p.thawed = make(chan struct{})
	default: // frozen already
	}
}

// Thaw relays again, what was held first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.thawLocked()
}

func (p *Proxy) thawLocked() {
	select {
	case <-p.thawed:
	default:
		close(p.thawed)
	}
}

// gate waits while the proxy is frozen.
func (p *Proxy) gate() {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	<-thawed
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
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				p.gate()
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
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
