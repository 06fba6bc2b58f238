package kube_test

import (
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

// testFirstListStreamed: while the API server's stream of the first list is held halfway,
// the watch has already sent the leases it brought, as partial batches; once the stream goes
// on, the first whole batch completes the list, and every lease is there once.
func testFirstListStreamed(t *testing.T, c *cluster) {
	const prefix, peers = "stream.weft.test", 120
	want := map[string]netip.Addr{}
	for i := range peers {
		ip := fmt.Sprintf("192.0.2.%d", i+1)
		// Named to come first in the stream, which is in the order of the names.
		createNode(t, c.admin, fmt.Sprintf("0-stream-%03d", i), peerAnnotations(prefix, vxlanAttrs(ip)), fmt.Sprintf("10.42.%d.0/24", 100+i))
		want[fmt.Sprintf("10.42.%d.0-24", 100+i)] = netip.MustParseAddr(ip)
	}

	// The stream's body passes its first 16 KiB (a few dozen Nodes), then holds the rest
	// until release.
	release := make(chan struct{})
	var held sync.Once
	rc := rest.CopyConfig(c.weft)
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(req)
			if err != nil || req.URL.Path != "/api/v1/nodes" || req.URL.Query().Get("sendInitialEvents") != "true" {
				return resp, err
			}
			held.Do(func() {
				resp.Body = &heldBody{ReadCloser: resp.Body, pass: 16 << 10, release: release, closed: make(chan struct{})}
			})
			return resp, err
		})
	})
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: rc, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf), NodeName: "stream-observer", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, m)

	// Held: partial batches only, of the leases streamed so far.
	select {
	case b := <-w.ch:
		if !b.Partial {
			t.Fatalf("a whole batch of %d events while the list's stream is held", len(b.Events))
		}
		for _, ev := range b.Events {
			if ip, ok := want[ev.Lease.Key()]; ev.Type != subnet.EventAdded || !ok || ev.Lease.Attrs.PublicIP != ip {
				t.Errorf("partial batch: %s %s at %s, not a lease of the list", ev.Type, ev.Lease.Key(), ev.Lease.Attrs.PublicIP)
			}
			w.state[ev.Lease.Key()] = ev.Lease
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no partial batch while the list's stream was held")
	}
	if len(w.state) == 0 || len(w.state) >= peers {
		t.Errorf("the partial batches before the stream was held hold %d leases, want some of the %d", len(w.state), peers)
	}
	streamed := len(w.state)

	close(release)
	w.next(t, 30*time.Second, "the rest of the list")
	for key, ip := range want {
		if l, ok := w.state[key]; !ok || l.Attrs.PublicIP != ip {
			t.Errorf("after the whole batch, lease %s: %v, want one at %s", key, l.Attrs.PublicIP, ip)
		}
	}
	if len(w.state) != peers {
		t.Errorf("after the whole batch the watch holds %d leases, want %d", len(w.state), peers)
	}
	t.Logf("%d of %d leases came in partial batches while the stream was held", streamed, peers)
}

// heldBody passes the first pass bytes of a response body, then holds the rest until release
// is closed (or the body is).
type heldBody struct {
	io.ReadCloser
	pass    int
	release <-chan struct{}
	closed  chan struct{}
	once    sync.Once
}

func (b *heldBody) Read(p []byte) (int, error) {
	if b.pass <= 0 {
		select {
		case <-b.release:
		case <-b.closed:
			return 0, io.ErrClosedPipe
		}
		return b.ReadCloser.Read(p)
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.pass)])
	b.pass -= n
	return n, err
}

func (b *heldBody) Close() error {
	b.once.Do(func() { close(b.closed) })
	return b.ReadCloser.Close()
}

// TestWatchWithoutStreamedLists: an API server that does not stream lists (before 1.32, or
// with the WatchList feature off) has the reflector list instead; the first batch is then
// one whole batch, as before streamed lists, and changes follow.
func TestWatchWithoutStreamedLists(t *testing.T) {
	c := newCluster(t, "--feature-gates=WatchList=false")
	const prefix = "liststream.weft.test"
	createNode(t, c.admin, "listed-a", peerAnnotations(prefix, vxlanAttrs("192.0.2.51")), "10.42.51.0/24")
	createNode(t, c.admin, "listed-b", peerAnnotations(prefix, vxlanAttrs("192.0.2.52")), "10.42.52.0/24")
	var restarts atomic.Int64
	log, _ := testLogger(t)
	m, err := kube.New(kube.Config{REST: c.weft, AnnotationPrefix: prefix, NetConfPath: writeNetConf(t, netConf), NodeName: "listed-observer", Logger: log,
		OnWatchRestart: func(error) { restarts.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, m)
	select {
	case b := <-w.ch:
		if b.Partial || len(b.Events) != 2 {
			t.Fatalf("first batch: partial %t with %d events, want the whole list's 2", b.Partial, len(b.Events))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no first batch")
	}
	w.batches++
	createNode(t, c.admin, "listed-c", peerAnnotations(prefix, vxlanAttrs("192.0.2.53")), "10.42.53.0/24")
	w.until(t, "the node created after the list", func(s map[string]subnet.Lease) bool {
		return s["10.42.53.0-24"].Attrs.PublicIP == netip.MustParseAddr("192.0.2.53")
	})
	// The streamed list the server refuses is no interruption of the watch.
	if n := restarts.Load(); n != 0 {
		t.Errorf("%d watch restarts counted", n)
	}
}
