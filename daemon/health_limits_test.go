package daemon

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestHealthServerLimits: the health endpoints cut off a client that holds a connection
// without finishing its request (slowloris), and refuse oversized headers, bodies and
// methods other than GET and HEAD, while a well-behaved GET is answered.
func TestHealthServerLimits(t *testing.T) {
	h := newHealth(DefaultConfig(), newMetrics(), nil, nil)
	port := freePort(t)
	lim := httpLimits{readHeader: 200 * time.Millisecond, read: 400 * time.Millisecond, write: 2 * time.Second,
		idle: 300 * time.Millisecond, maxHeader: 4 << 10, maxBody: 1 << 10}
	stop, err := h.serve(netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), slog.New(slog.NewTextHandler(testWriter{t}, nil)), lim)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	base := "http://" + addr

	if code, _ := get(base + "/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz: %d", code)
	}

	// A request line and then nothing: the connection is closed after the header timeout.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("reading from the stalled connection: %v (the server never closed it)", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("a stalled request held its connection for %v", took)
	}

	for _, c := range []struct {
		name   string
		req    func() *http.Request
		status int
	}{
		{"POST", func() *http.Request {
			r, _ := http.NewRequest(http.MethodPost, base+"/status", strings.NewReader("x"))
			return r
		}, http.StatusMethodNotAllowed},
		{"a large body", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, base+"/status", strings.NewReader(strings.Repeat("x", 64<<10)))
			return r
		}, http.StatusRequestEntityTooLarge},
		{"large headers", func() *http.Request {
			r, _ := http.NewRequest(http.MethodGet, base+"/status", nil)
			r.Header.Set("X-Junk", strings.Repeat("x", 64<<10))
			return r
		}, http.StatusRequestHeaderFieldsTooLarge},
		{"HEAD", func() *http.Request {
			r, _ := http.NewRequest(http.MethodHead, base+"/readyz", nil)
			return r
		}, http.StatusServiceUnavailable}, // answered: not ready, nothing converged here
	} {
		resp, err := http.DefaultClient.Do(c.req())
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Errorf("%s: status %d, want %d", c.name, resp.StatusCode, c.status)
		}
	}

	// An idle keep-alive connection is closed after the idle timeout.
	k, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	if _, err := io.WriteString(k, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(k)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("keep-alive GET: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = k.SetReadDeadline(time.Now().Add(5 * time.Second))
	start = time.Now()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("an idle connection was not closed: %v", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("an idle connection stayed open %v", took)
	}
}
