package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/daemon"
	"github.com/weftnet/weft/status"
)

func testStatus(now time.Time) status.Node {
	exp, written := now.Add(24*time.Hour), now.Add(-5*time.Second)
	return status.Node{
		Interface: "eth0", Address: "192.0.2.11", PublicIP: "203.0.113.1", Backend: "vxlan",
		Lease: &status.Lease{Subnet: "10.244.1.0/24", Expiration: &exp,
			BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"0a:00:00:00:00:01"}`)},
		Peers: []status.Peer{
			{Key: "10.244.2.0-24", Subnet: "10.244.2.0/24", PublicIP: "192.0.2.12", BackendType: "vxlan",
				BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"0a:00:00:00:00:02"}`), State: "programmed"},
			{Key: "10.244.3.0-24", Subnet: "10.244.3.0/24", PublicIP: "192.0.2.13", BackendType: "host-gw",
				State: "skipped", Reason: `backend type "host-gw", this node runs "vxlan"`},
			{Key: "10.244.0.0-24", Subnet: "10.244.0.0/24", PublicIP: "192.0.2.12", BackendType: "vxlan",
				BackendData: json.RawMessage(`{"VNI":1,"VtepMAC":"0a:00:00:00:00:09"}`), State: "skipped",
				Reason: "public IP 192.0.2.12 is also claimed by 10.244.2.0-24", ClashesWith: "10.244.2.0-24"},
		},
		Last:     &status.Converge{Time: now.Add(-3 * time.Second), Duration: "412µs", Changes: "route:1", Error: "setting route: file exists"},
		NotReady: "last convergence failed: setting route: file exists",
		Overlay: &status.Overlay{Peers: 3, Answered: 2, Unreachable: 1, Period: "2s", MTU: 1450,
			MTUShort: []status.PathMTU{{Key: "10.244.2.0-24", Address: "10.244.2.0", MTU: 1350}, {Key: "10.244.2.0-24", Family: "IPv6", Address: "fd00:2::"}}},
		Unreachable: []status.Unreachable{{Key: "10.244.3.0-24", Address: "10.244.3.1", Since: now.Add(-90 * time.Second),
			Error: "probe: ping 10.244.3.1: no answer after 1s"}},
		Offload: []status.Offload{{Device: "flannel.1", Mode: "auto", Reason: "turned off by weftd: peer 10.244.2.0-24 (10.244.2.0) answers ICMP through the tunnel but neither TCP nor UDP",
			Problem: "offload off did not help: 10.244.2.0-24"}},
		NetworkPolicy: &status.NetworkPolicy{Open: 4, Written: &written,
			Pods: []status.PolicyPod{{Pod: "shop/db", IPs: []string{"10.244.1.7", "fd00:1::7"}, Ingress: true, Policies: []string{"shop/db-in", "shop/deny-all"}},
				{Pod: "shop/web", IPs: []string{"10.244.1.5"}, Ingress: true, Egress: true, Policies: []string{"shop/deny-all"}}},
			Refused: []status.PolicyRefused{{Policy: "shop/sctp", Reason: "spec.ingress[0].ports[0]: SCTP"}}},
	}
}

func TestWriteStatus(t *testing.T) {
	now := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	if err := writeStatus(&b, testStatus(now), now); err != nil {
		t.Fatal(err)
	}
	want := `node            eth0 192.0.2.11, public IP 203.0.113.1, backend vxlan
lease           10.244.1.0/24, expires 2026-11-23T01:00:00Z (in 24h0m), VNI 1, VTEP MAC 0a:00:00:00:00:01
ready           no: last convergence failed: setting route: file exists
converged       2026-11-22T00:59:57Z (3s ago), took 412µs, wrote route:1, FAILED: setting route: file exists
overlay         2 of 3 peers answer probes through the data plane, 1 unreachable; each probed at least every 2s
path mtu        SHORT: 2 overlay peers' paths carry less than the pods' MTU of 1450 bytes: 10.244.2.0-24 (passes 1350), 10.244.2.0-24 IPv6
network policy  2 pods isolated, 4 open, 1 refused policies, last written 5s ago
offload         flannel.1 tx checksum offload OFF: turned off by weftd: peer 10.244.2.0-24 (10.244.2.0) answers ICMP through the tunnel but neither TCP nor UDP (mode auto); offload off did not help: 10.244.2.0-24

unreachable: 1
PEER           PROBED      SINCE                             LAST ERROR
10.244.3.0-24  10.244.3.1  2026-11-22T00:58:30Z (1m30s ago)  probe: ping 10.244.3.1: no answer after 1s

isolated pods: 2
POD                 ADDRESSES             ISOLATED        POLICIES
shop/db             10.244.1.7,fd00:1::7  ingress         shop/db-in,shop/deny-all
shop/web            10.244.1.5            ingress,egress  shop/deny-all
refused: shop/sctp                                        spec.ingress[0].ports[0]: SCTP

peers: 3
SUBNET         PUBLIC IP   BACKEND  VTEP MAC           STATE       CLASHES WITH   REASON
10.244.2.0/24  192.0.2.12  vxlan    0a:00:00:00:00:02  programmed  -              
10.244.3.0/24  192.0.2.13  host-gw  -                  skipped     -              backend type "host-gw", this node runs "vxlan"
10.244.0.0/24  192.0.2.12  vxlan    0a:00:00:00:00:09  skipped     10.244.2.0-24  public IP 192.0.2.12 is also claimed by 10.244.2.0-24
`
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	if err := writeStatus(&b, status.Node{Ready: false, NotReady: "no lease yet: subnet.env not written"}, now); err != nil {
		t.Fatal(err)
	}
	want = `node       -, backend -
lease      none yet
ready      no: no lease yet: subnet.env not written
converged  not yet

peers: 0
`
	if b.String() != want {
		t.Errorf("table of a starting weftd:\n%s\nwant:\n%s", b.String(), want)
	}
}

// TestStatusCommand: weftctl status against an HTTP server answering as weftd does.
func TestStatusCommand(t *testing.T) {
	st := testStatus(time.Now())
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) { _ = json.NewEncoder(w).Encode(st) })
	srv := httptest.NewServer(mux)
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")

	var out, errOut bytes.Buffer
	if code := Main(context.Background(), []string{"status", "--addr=" + addr, "-o", "json"}, &out, &errOut); code != ExitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	var back status.Node
	if err := json.Unmarshal(out.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Lease.Subnet != st.Lease.Subnet || len(back.Peers) != 3 || back.Peers[1].Reason != st.Peers[1].Reason || back.Peers[2].ClashesWith != "10.244.2.0-24" ||
		back.NetworkPolicy == nil || len(back.NetworkPolicy.Pods) != 2 || back.NetworkPolicy.Pods[0].Policies[1] != "shop/deny-all" {
		t.Errorf("JSON round trip: %+v", back)
	}

	out.Reset()
	if code := Main(context.Background(), []string{"status", "--addr", addr}, &out, &errOut); code != ExitOK ||
		!strings.HasPrefix(out.String(), "node            eth0 192.0.2.11") || !strings.Contains(out.String(), "shop/web            10.244.1.5            ingress,egress  shop/deny-all") {
		t.Errorf("table: exit %d:\n%s%s", code, out.String(), errOut.String())
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"status", "--addr=8285"}, ExitUsage, `weftctl status: --addr="8285": want host:port, e.g. 127.0.0.1:8285`},
		{[]string{"status", "--addr=" + addr + "0"}, ExitProblems, "weftctl status: GET http://" + addr + "0/status (--addr=" + addr + "0): "},
		{[]string{"status", "--timeout=0s"}, ExitUsage, "weftctl status: --timeout=0s: must be positive"},
	} {
		errOut.Reset()
		if code := Main(context.Background(), tc.args, &out, &errOut); code != tc.code || !strings.HasPrefix(errOut.String(), tc.want) {
			t.Errorf("weftctl %s: exit %d, %q; want %d, %q", strings.Join(tc.args, " "), code, errOut.String(), tc.code, tc.want)
		}
	}

	// Not weftd: a 404 and a body that is not the status.
	other := httptest.NewServer(http.NotFoundHandler())
	defer other.Close()
	errOut.Reset()
	if code := Main(context.Background(), []string{"status", "--addr=" + strings.TrimPrefix(other.URL, "http://")}, &out, &errOut); code != ExitProblems ||
		!strings.Contains(errOut.String(), "/status: 404 404 page not found") {
		t.Errorf("against a server without /status: exit %d, %q", code, errOut.String())
	}
}

func TestMainUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		out  string // start of stdout or stderr
	}{
		{nil, ExitUsage, "weftctl: look at a weft cluster"},
		{[]string{"frobnicate"}, ExitUsage, `weftctl: unknown command "frobnicate"`},
		{[]string{"help"}, ExitOK, "weftctl: look at a weft cluster"},
		{[]string{"doctor", "-h"}, ExitOK, "Usage of weftctl doctor:"},
		{[]string{"--version"}, ExitOK, "weftctl "},
	} {
		var out, errOut bytes.Buffer
		code := Main(context.Background(), tc.args, &out, &errOut)
		if got := out.String() + errOut.String(); code != tc.code || !strings.HasPrefix(got, tc.out) {
			t.Errorf("weftctl %q: exit %d, %q; want %d, %q...", tc.args, code, got, tc.code, tc.out)
		}
	}
}

// TestFlagsFromEnvironment: weftd's flags come from its environment variables unless given
// (a list flag from the command line is not added to by the environment's), the others
// never do; they are weftd's own, with its defaults.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("WEFTD_ETCD_PREFIX", "/from-env")
	t.Setenv("FLANNELD_SUBNET_FILE", "/run/from-env.env")
	t.Setenv("WEFTD_IFACE", "eth1,eth2")
	t.Setenv("WEFTD_KUBE_SUBNET_MGR", "true")
	t.Setenv("WEFTD_O", "json") // not a weftd flag: ignored
	parseArgs := func(args ...string) (daemon.Config, common) {
		t.Helper()
		var c common
		cfg := daemon.DefaultConfig()
		var addr string
		if err := parse(newDoctorFlagSet(&c, &cfg, &addr), args, &bytes.Buffer{}, &c); err != nil {
			t.Fatal(err)
		}
		return cfg, c
	}
	cfg, c := parseArgs()
	if cfg.EtcdPrefix != "/from-env" || cfg.SubnetFile != "/run/from-env.env" || !cfg.KubeSubnetMgr || !slices.Equal(cfg.Ifaces, []string{"eth1", "eth2"}) ||
		c.output != "table" || cfg.NetConfigPath != daemon.DefaultConfig().NetConfigPath {
		t.Errorf("from the environment: %+v, output %q", cfg, c.output)
	}
	cfg, _ = parseArgs("--etcd-prefix=/given", "--subnet-file=/given.env", "--iface=eth0", "--kube-subnet-mgr=false")
	if cfg.EtcdPrefix != "/given" || cfg.SubnetFile != "/given.env" || !slices.Equal(cfg.Ifaces, []string{"eth0"}) || cfg.KubeSubnetMgr {
		t.Errorf("given flags must win: %+v", cfg)
	}
}

// TestWeftdAddr: in weftd's pod, weftctl finds weftd where the DaemonSet's environment
// told weftd to listen.
func TestWeftdAddr(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{nil, defaultAddr},
		{map[string]string{"WEFTD_HEALTHZ_IP": "192.0.2.7"}, "192.0.2.7:8285"},
		{map[string]string{"FLANNELD_HEALTHZ_IP": "0.0.0.0", "FLANNELD_HEALTHZ_PORT": "8471"}, "127.0.0.1:8471"},
		{map[string]string{"WEFTD_HEALTHZ_IP": "2001:db8::7", "FLANNELD_HEALTHZ_IP": "192.0.2.9"}, "[2001:db8::7]:8285"},
		{map[string]string{"WEFTD_HEALTHZ_IP": "node-1"}, defaultAddr},
	} {
		got := weftdAddr(func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok })
		if got != tc.want {
			t.Errorf("environment %v: %s, want %s", tc.env, got, tc.want)
		}
	}
}
