package daemon

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/subnet/etcd"
)

// TestDebugPprof: the profiles are served with --debug-pprof, gzipped protobufs as `go tool
// pprof` reads them (and an execution trace), and not at all without it.
func TestDebugPprof(t *testing.T) {
	for _, on := range []bool{false, true} {
		// A node of its own on an etcd of its own: two nodes with the same public IP on one
		// etcd would each take the other's lease over.
		t.Run(fmt.Sprintf("debug-pprof=%t", on), func(t *testing.T) {
			srv := etcdtest.Start(t, etcdtest.Options{})
			cli := srv.Client(t)
			if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
				t.Fatal(err)
			}
			port := freePort(t)
			base := fmt.Sprintf("http://127.0.0.1:%d", port)
			startNodeWith(t, cli, t.TempDir(), &fakePlane{mac: backend.MAC{0x0e, 1}}, func(c *Config) {
				c.HealthzPort, c.DebugPprof = port, on
			})
			eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })
			for _, path := range []string{"/debug/pprof/heap?gc=1", "/debug/pprof/goroutine", "/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
				code, body := get(base + path)
				magic := []byte{0x1f, 0x8b} // a gzipped profile
				if strings.Contains(path, "trace") {
					magic = []byte("go 1.") // an execution trace
				}
				switch {
				case !on && code != http.StatusNotFound:
					t.Errorf("GET %s without --debug-pprof: %d, want 404", path, code)
				case on && (code != http.StatusOK || !bytes.HasPrefix([]byte(body), magic)):
					t.Errorf("GET %s with --debug-pprof: %d, %d bytes starting %q: want 200 and %q", path, code, len(body), body[:min(len(body), 16)], magic)
				}
			}
			if code, _ := get(base + "/debug/pprof/nosuch"); on && code != http.StatusNotFound {
				t.Errorf("GET /debug/pprof/nosuch: %d, want 404", code)
			}
			if code, _ := get(base + "/debug/pprof/profile?seconds=1000"); on && code != http.StatusBadRequest {
				t.Errorf("GET /debug/pprof/profile?seconds=1000: %d, want 400", code)
			}
		})
	}
}
