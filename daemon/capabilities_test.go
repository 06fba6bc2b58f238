package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/etcdtest"
	"github.com/weftnet/weft/linux"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/status"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// countingPinger answers every probe, and counts them.
type countingPinger struct{ n atomic.Int64 }

func (p *countingPinger) Ping(context.Context, netip.Addr, int) (time.Duration, error) {
	p.n.Add(1)
	return time.Millisecond, nil
}

// capsRun is a daemon that runCaps started.
type capsRun struct {
	base string // the URL of /status and the others
	done chan error
	once sync.Once
	err  error
}

// result waits for RunWith's result.
func (r *capsRun) result() error {
	r.once.Do(func() { r.err = <-r.done })
	return r.err
}

// runCaps runs the daemon on a fake plane with the capabilities caps, a pinger and
// /status on a free port, until the test ends.
func runCaps(t *testing.T, cli *clientv3.Client, caps backend.Capabilities, pinger *countingPinger) *capsRun {
	t.Helper()
	cfg := DefaultConfig()
	cfg.SubnetFile = filepath.Join(t.TempDir(), "subnet.env")
	cfg.HealthzPort = freePort(t)
	cfg.Ifaces = []string{"eth0"}
	cfg.ProbeInterval = 100 * time.Millisecond
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	ctx, cancel := context.WithCancel(context.Background())
	r := &capsRun{base: fmt.Sprintf("http://127.0.0.1:%d", cfg.HealthzPort), done: make(chan error, 1)}
	go func() {
		r.done <- RunWith(ctx, cfg, log, Deps{
			Manager:    etcd.New(cli, etcd.Options{Logger: log}),
			Plane:      &fakePlane{mac: backend.MAC{0x0e, 1}, caps: &caps},
			Interfaces: func() ([]netif.Interface, error) { return testIfaces, nil },
			DefaultIf:  func() (string, error) { return "eth0", nil },
			Pinger:     pinger,
		})
	}()
	t.Cleanup(func() { cancel(); _ = r.result() })
	return r
}

// TestDaemonAsksThePlane: what the daemon does that depends on the data plane, it reads from
// the plane's Capabilities, never from the OS it runs on: a config the plane refuses stops
// start-up before any lease, naming the key and the plane's reason; the VNI a config leaves
// out is the plane's default, published in the lease; the overlay probes run only on a plane
// that has them.
func TestDaemonAsksThePlane(t *testing.T) {
	// start starts etcd holding the network config conf.
	start := func(t *testing.T, conf string) *clientv3.Client {
		t.Helper()
		cli := etcdtest.Start(t, etcdtest.Options{}).Client(t)
		if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/config", conf); err != nil {
			t.Fatal(err)
		}
		return cli
	}

	t.Run("a config the plane refuses", func(t *testing.T) {
		caps := linux.Capabilities()
		caps.OS = "Testix"
		caps.VXLAN.DirectRouting = backend.Feature{Why: "its tunnels are all it has"}
		cli := start(t, `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan","DirectRouting":true}}`)
		err := runCaps(t, cli, caps, nil).result()
		var ce *subnet.ConfigError
		if !errors.As(err, &ce) || ce.Key != "Backend.DirectRouting" || !strings.Contains(err.Error(), "not available on Testix: its tunnels are all it has") {
			t.Errorf("start-up: %v; want the config refused naming Backend.DirectRouting and the plane's reason", err)
		}
		if resp, err := cli.Get(t.Context(), etcd.DefaultPrefix+"/subnets/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 0 {
			t.Errorf("leases written before the config was refused: %v %v", err, resp.Kvs)
		}
	})

	for _, probes := range []bool{true, false} {
		t.Run(fmt.Sprintf("probes %v", probes), func(t *testing.T) {
			caps := linux.Capabilities()
			caps.VXLAN.DefaultVNI, caps.Probes = 4242, probes
			cli := start(t, `{"Network":"10.244.0.0/16","SubnetMin":"10.244.100.0","Backend":{"Type":"vxlan"}}`)
			v := `{"PublicIP":"192.0.2.17","BackendType":"vxlan","BackendData":{"VNI":4242,"VtepMAC":"0e:00:00:00:00:07"}}`
			if _, err := cli.Put(t.Context(), etcd.DefaultPrefix+"/subnets/10.244.7.0-24", v); err != nil {
				t.Fatal(err)
			}
			pinger := &countingPinger{}
			base := runCaps(t, cli, caps, pinger).base
			eventually(t, "ready", func() bool { code, _ := get(base + "/readyz"); return code == 200 })
			_, body := get(base + "/status")
			var st status.Node
			if err := json.Unmarshal([]byte(body), &st); err != nil {
				t.Fatalf("/status: %v\n%s", err, body)
			}
			// The peer is programmed only if its VNI is the node's: the plane's default.
			var own backend.VXLANData
			if st.Lease != nil {
				own, _ = backend.DecodeVXLANData(st.Lease.BackendData)
			}
			if len(st.Peers) != 1 || st.Peers[0].State != "programmed" || own.VNI != 4242 {
				t.Errorf("/status: %s; want the lease and the peer with the plane's default VNI 4242", body)
			}
			if (st.Overlay != nil) != probes {
				t.Errorf("/status overlay %+v, with a plane whose probes are %v", st.Overlay, probes)
			}
			if probes {
				eventually(t, "a probe", func() bool { return pinger.n.Load() > 0 })
			} else if n := pinger.n.Load(); n != 0 {
				t.Errorf("%d probes sent through a plane that has none", n)
			}
		})
	}
}
