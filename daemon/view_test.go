package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet/etcd"
)

// TestReadersDoNotWaitForApply: while the data plane is busy in an Apply (which takes
// seconds at 20,000 peers, minutes through HNS), /metrics, /status, /healthz and /readyz
// answer, from what the loop last published. A reader that waited for the Apply would hang
// until the test's own deadline, which fails the test; nothing here measures time.
func TestReadersDoNotWaitForApply(t *testing.T) {
	srv := etcdtest.Start(t, etcdtest.Options{})
	cli := srv.Client(t)
	if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", vxlanConf); err != nil {
		t.Fatal(err)
	}
	putPeer(t, cli, "10.244.7.0-24", "192.0.2.17", "0e:00:00:00:00:07")
	port := freePort(t)
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	plane := &fakePlane{mac: backend.MAC{0x0e, 1}}
	startNodeWith(t, cli, t.TempDir(), plane, func(c *Config) { c.HealthzPort = port })
	eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == http.StatusOK })

	g := plane.holdNext()
	putPeer(t, cli, "10.244.8.0-24", "192.0.2.18", "0e:00:00:00:00:08")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("the daemon never applied the second peer")
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(g.release)
		}
	}
	defer release()

	ask := func(path string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s while the plane is busy: %v (a reader waits for the data plane)", path, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("GET %s while the plane is busy: %v", path, err)
		}
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := ask(path); code != http.StatusOK {
			t.Errorf("GET %s while the plane is busy: %d %s", path, code, body)
		}
	}
	if _, metrics := ask("/metrics"); !strings.Contains(metrics, `weft_peers{backend="vxlan",state="programmed"} 1`) {
		t.Errorf("/metrics while the plane is busy: want the one peer programmed so far\n%s", metrics)
	}
	_, body := ask("/status")
	var st status.Node
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("/status: %v\n%s", err, body)
	}
	if len(st.Peers) != 1 || st.Peers[0].Key != "10.244.7.0-24" {
		t.Errorf("/status while the plane is busy: peers %+v, want the one programmed so far", st.Peers)
	}

	// Once the Apply is done the readers see the new peer.
	release()
	eventually(t, "the second peer in /status", func() bool {
		_, body := get(base + "/status")
		var st status.Node
		return json.Unmarshal([]byte(body), &st) == nil && len(st.Peers) == 2
	})
}
