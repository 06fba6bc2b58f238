package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/weftnet/weft/ctl"
	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/promtest"
	"github.com/weftnet/weft/status"
)

const (
	// promPort is where the test's Prometheus listens, on the loopback of a node namespace.
	promPort = 9090
	// promTimeout bounds Prometheus's start and its first scrapes (one a second).
	promTimeout = 30 * time.Second
	// datastoreTimeout is weftd's --datastore-timeout here: how long etcd may be gone before
	// /readyz fails. Short, so the test does not wait the default 30 s.
	datastoreTimeout = 2 * time.Second
)

// TestObservability: on a two-node vxlan cluster, weftd's /metrics passes promtool, a real
// Prometheus scrapes it and serves back what weft reports, weftctl shows the leases and a
// node's status, weftctl doctor passes on a healthy node and finds a route deleted by hand,
// and /readyz fails while etcd is stopped and recovers after.
func TestObservability(t *testing.T) {
	bins := needBinaries(t)
	prom := needPrometheus(t)
	tools := buildTools(t)
	c, err := cluster.New(t, cluster.Options{
		NetConf:     `{"Network":"10.244.0.0/16","Backend":{"Type":"vxlan"}}`,
		Weftd:       bins.weftd,
		WeftdArgs:   []string{"--datastore-timeout=" + datastoreTimeout.String()},
		CNIBin:      bins.cniBin,
		EtcdCommand: tools.etcdCommand(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			dumpCluster(t, c)
		}
	})
	nodes := startNodes(t, c, "n1", "n2")
	n1, n2 := nodes[0], nodes[1]
	sn1, sn2 := mustSubnet(t, n1), mustSubnet(t, n2)
	waitRoute(t, n1, sn2)
	waitRoute(t, n2, sn1)

	t.Run("promtool", func(t *testing.T) {
		code, body, err := n1.Get("/metrics")
		if err != nil || code != http.StatusOK {
			t.Fatalf("GET /metrics on %s: %d %v", n1.Name, code, err)
		}
		cmd := exec.Command(prom.Promtool, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		out, err := cmd.CombinedOutput()
		// promtool exits 1 when it cannot parse the exposition, 3 when its lint has remarks,
		// one a line, each starting with the metric's name. Remarks on weft's own metrics
		// fail the test; those on the Go and process collectors' are theirs to fix.
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 3) {
			t.Fatalf("promtool check metrics on weftd's /metrics (%d bytes): %v\n%s", len(body), err, out)
		}
		for line := range strings.Lines(string(out)) {
			if strings.HasPrefix(line, "weft_") {
				t.Errorf("promtool check metrics: %s", strings.TrimSpace(line))
			} else if strings.TrimSpace(line) != "" {
				t.Logf("promtool check metrics (not weft's): %s", strings.TrimSpace(line))
			}
		}
	})

	t.Run("prometheus", func(t *testing.T) {
		api := startPrometheus(t, prom.Server, n1)
		var weftValue string
		for line := range strings.Lines(mustGet(t, n1, "/metrics")) {
			if strings.HasPrefix(line, `weft_peers{backend="vxlan",state="programmed"} `) {
				weftValue = strings.TrimSpace(strings.Fields(line)[1])
			}
		}
		if weftValue != "1" {
			t.Fatalf("weftd on %s reports weft_peers{state=\"programmed\"} %q; want 1", n1.Name, weftValue)
		}
		start := time.Now()
		var last string
		for {
			res, err := api.query(`weft_peers{state="programmed"}`)
			if err == nil && len(res) == 1 && res[0].value() == weftValue {
				break
			}
			last = fmt.Sprintf("%v (%v)", res, err)
			if time.Since(start) > promTimeout {
				t.Fatalf("Prometheus has not served weft_peers{state=\"programmed\"} %s after %v: last %s", weftValue, promTimeout, last)
			}
			time.Sleep(250 * time.Millisecond)
		}
		t.Logf("Prometheus served weft_peers = %s %v after it started", weftValue, time.Since(start).Round(time.Millisecond))

		res, err := api.query("weft_lease_info")
		if err != nil || len(res) != 1 {
			t.Fatalf("weft_lease_info from Prometheus: %v (%v); want one series", res, err)
		}
		env, err := n1.SubnetEnv()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res[0].Metric["subnet"], env.Subnet.Masked().String(); got != want {
			t.Errorf("weft_lease_info{subnet=%q}; subnet.env has FLANNEL_SUBNET=%s, so want %q", got, env.Subnet, want)
		}
		if got, want := res[0].Metric["public_ip"], n1.IP.String(); got != want {
			t.Errorf("weft_lease_info{public_ip=%q}; want %q", got, want)
		}
	})

	t.Run("weftctl status", func(t *testing.T) {
		out := tools.mustWeftctl(t, n1, "status", "--addr=127.0.0.1:"+strconv.Itoa(cluster.HealthzPort))
		t.Logf("weftctl status on %s:\n%s", n1.Name, out)
		var st status.Node
		if err := json.Unmarshal([]byte(tools.mustWeftctl(t, n1, "status", "-o", "json")), &st); err != nil {
			t.Fatal(err)
		}
		if !st.Ready || st.Lease == nil || st.Lease.Subnet != sn1.String() || st.Interface != "eth0" || st.PublicIP != n1.IP.String() {
			t.Errorf("status of %s: ready %t (%s), lease %+v, interface %s, public IP %s; want ready, %s, eth0, %s",
				n1.Name, st.Ready, st.NotReady, st.Lease, st.Interface, st.PublicIP, sn1, n1.IP)
		}
		if len(st.Peers) != 1 || st.Peers[0].Subnet != sn2.String() || st.Peers[0].State != "programmed" {
			t.Errorf("peers of %s: %+v; want %s programmed", n1.Name, st.Peers, sn2)
		}
		if st.Last == nil || st.Last.Error != "" {
			t.Errorf("last convergence of %s: %+v; want one, without error", n1.Name, st.Last)
		}
	})

	t.Run("weftctl leases", func(t *testing.T) {
		etcdFlag := "--etcd-endpoints=" + cluster.EtcdURL
		t.Logf("weftctl leases:\n%s", tools.mustWeftctl(t, n2, "leases", etcdFlag))
		var rows []ctl.LeaseRow
		if err := json.Unmarshal([]byte(tools.mustWeftctl(t, n2, "leases", etcdFlag, "-o", "json")), &rows); err != nil {
			t.Fatal(err)
		}
		want := map[string]*cluster.Node{sn1.String(): n1, sn2.String(): n2}
		if len(rows) != len(want) {
			t.Fatalf("weftctl leases: %d rows %+v; want %d", len(rows), rows, len(want))
		}
		for _, r := range rows {
			n := want[r.Subnet]
			if n == nil {
				t.Errorf("weftctl leases: unexpected lease %+v", r)
				continue
			}
			mac := vtepMAC(t, leaseOf(t, c, mustSubnet(t, n)))
			if r.PublicIP != n.IP.String() || r.BackendType != "vxlan" || r.VtepMAC != mac || r.Error != "" {
				t.Errorf("weftctl leases: %+v; want public IP %s, vxlan, VtepMAC %s", r, n.IP, mac)
			}
			// etcd leases live 24 h and are renewed an hour before they end.
			if r.Expiration == nil || time.Until(*r.Expiration) < 22*time.Hour || time.Until(*r.Expiration) > 25*time.Hour {
				t.Errorf("weftctl leases: %s expires %v; want in about 24 h", r.Subnet, r.Expiration)
			}
		}
	})

	t.Run("weftctl doctor", func(t *testing.T) {
		doctor := func() (ctl.DoctorReport, int) {
			t.Helper()
			// Beside weftd, with its environment (set -a; . /etc/weft/weftd.env), which
			// holds its flags.
			env := []string{"WEFTD_ETCD_ENDPOINTS=" + cluster.EtcdURL, "WEFTD_SUBNET_FILE=" + n1.SubnetFile, "WEFTD_IFACE=eth0"}
			table, _, _ := tools.weftctlEnv(t, n1, env, "doctor")
			t.Logf("weftctl doctor on %s:\n%s", n1.Name, table)
			out, stderr, code := tools.weftctlEnv(t, n1, env, "doctor", "-o", "json")
			var rep ctl.DoctorReport
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Fatalf("weftctl doctor -o json: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
			}
			return rep, code
		}
		failed := func(rep ctl.DoctorReport) []ctl.Finding {
			var fs []ctl.Finding
			for _, f := range rep.Findings {
				if f.Result == "fail" {
					fs = append(fs, f)
				}
			}
			return fs
		}

		if rep, code := doctor(); code != 0 || rep.Problems != 0 {
			t.Fatalf("doctor on a healthy node: exit %d, problems %+v; want 0", code, failed(rep))
		}

		// weftd would put the route back within milliseconds; stopped, it leaves the data
		// plane as it is, and the drift stays for the doctor to see.
		if _, err := n1.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		nodeExec(t, n1, "ip", "route", "del", sn2.String())
		rep, code := doctor()
		if code != ctl.ExitProblems {
			t.Errorf("doctor with weftd stopped and a route deleted: exit %d; want %d", code, ctl.ExitProblems)
		}
		checks := map[string]ctl.Finding{}
		for _, f := range failed(rep) {
			checks[f.Check] = f
		}
		route, weftd := checks["route"], checks["weftd"]
		// Through its nexthop object where the kernel has them, else a plain route.
		viaNexthop := strings.HasPrefix(route.What, "missing: "+sn2.String()+" nhid ")
		viaGateway := strings.HasPrefix(route.What, "missing: "+sn2.String()+" via "+sn2.Addr().String()+" dev "+vxlanDevice)
		if len(checks) != 2 || !viaNexthop && !viaGateway ||
			!strings.Contains(route.Fix, "ip route replace "+sn2.String()) || weftd.What == "" {
			t.Errorf("doctor found %+v; want the missing route to %s (with the command that adds it) and weftd not answering", failed(rep), sn2)
		}

		if err := n1.Start(); err != nil {
			t.Fatal(err)
		}
		if err := n1.WaitReady(readyTimeout); err != nil {
			t.Fatal(err)
		}
		if rep, code := doctor(); code != 0 || rep.Problems != 0 {
			t.Errorf("doctor after weftd restarted: exit %d, problems %+v; want 0", code, failed(rep))
		}
	})

	t.Run("readiness without etcd", func(t *testing.T) {
		etcd := c.EtcdMembers()[0]
		if err := etcd.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		body := waitReadyz(t, n1, http.StatusServiceUnavailable, 5*datastoreTimeout+10*time.Second)
		t.Logf("%s: /readyz failed %v after etcd stopped: %s", n1.Name, time.Since(start).Round(time.Millisecond), body)
		if !strings.Contains(body, "datastore unreachable") {
			t.Errorf("%s: /readyz says %q; want it to say the datastore is unreachable", n1.Name, body)
		}
		if err := etcd.Start(); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		waitReadyz(t, n1, http.StatusOK, 60*time.Second)
		t.Logf("%s: /readyz ok %v after etcd restarted", n1.Name, time.Since(start).Round(time.Millisecond))
		waitReadyz(t, n2, http.StatusOK, 60*time.Second)
	})
}

// waitRoute waits until n routes to the peer subnet sn, of either family.
func waitRoute(t *testing.T, n *cluster.Node, sn netip.Prefix) {
	t.Helper()
	fam := "-4"
	if sn.Addr().Is6() {
		fam = "-6" // ip(8) shows IPv4 routes unless told otherwise
	}
	for start := time.Now(); ; time.Sleep(100 * time.Millisecond) {
		out := nodeExec(t, n, "ip", fam, "route", "show", "exact", sn.String())
		if strings.TrimSpace(out) != "" {
			return
		}
		if time.Since(start) > convergeTimeout {
			t.Fatalf("node %s has no route to %s after %v", n.Name, sn, convergeTimeout)
		}
	}
}

// waitReadyz waits until n's /readyz answers code, and returns its body.
func waitReadyz(t *testing.T, n *cluster.Node, code int, timeout time.Duration) string {
	t.Helper()
	var last string
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		got, body, err := n.Get("/readyz")
		if err == nil && got == code {
			return strings.TrimSpace(body)
		}
		last = fmt.Sprintf("%d %s (%v)", got, strings.TrimSpace(body), err)
		if time.Since(start) > timeout {
			t.Fatalf("%s: /readyz did not answer %d within %v; last: %s", n.Name, code, timeout, last)
		}
	}
}

func mustGet(t *testing.T, n *cluster.Node, path string) string {
	t.Helper()
	code, body, err := n.Get(path)
	if err != nil || code != http.StatusOK {
		t.Fatalf("GET %s on %s: %d %v", path, n.Name, code, err)
	}
	return body
}

// needPrometheus finds prometheus and promtool (promtest.Need), or skips the test.
func needPrometheus(t *testing.T) promtest.Binaries {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return promtest.Need(t, repo)
}

// testTools are the binaries the tests build besides weftd.
type testTools struct {
	weftctlBin string
	demo       string // the demo, whose --serve-etcd lets a test stop and start etcd members
}

func buildTools(t *testing.T) testTools {
	t.Helper()
	repo, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tt := testTools{weftctlBin: filepath.Join(dir, "weftctl"), demo: filepath.Join(dir, "weft-demo")}
	for bin, pkg := range map[string]string{tt.weftctlBin: "./cmd/weftctl", tt.demo: "./e2e/demo"} {
		start := time.Now()
		cmd := exec.Command("go", "build", "-o", bin, pkg)
		cmd.Dir = repo
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build -o %s %s: %v\n%s", bin, pkg, err, out)
		}
		t.Logf("built %s in %v", pkg, time.Since(start).Round(time.Millisecond))
	}
	return tt
}

// etcdCommand runs each member of the cluster's etcd as a process of its own, which a test
// can stop and start (cluster.EtcdMember).
func (tt testTools) etcdCommand() []string { return []string{tt.demo, "--serve-etcd"} }

// weftctl runs weftctl inside a node and returns its stdout, stderr and exit status.
func (tt testTools) weftctl(t *testing.T, n *cluster.Node, args ...string) (string, string, int) {
	t.Helper()
	return tt.weftctlEnv(t, n, nil, args...)
}

// weftctlEnv is weftctl with env ("KEY=value") added to this process's environment.
func (tt testTools) weftctlEnv(t *testing.T, n *cluster.Node, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS, tt.weftctlBin}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("weftctl %s in %s: %v", strings.Join(args, " "), n.Name, err)
	}
	return stdout.String(), stderr.String(), cmd.ProcessState.ExitCode()
}

// mustWeftctl runs weftctl inside a node and fails the test unless it succeeds.
func (tt testTools) mustWeftctl(t *testing.T, n *cluster.Node, args ...string) string {
	t.Helper()
	out, stderr, code := tt.weftctl(t, n, args...)
	if code != 0 {
		t.Fatalf("weftctl %s in %s: exit %d\n%s%s", strings.Join(args, " "), n.Name, code, out, stderr)
	}
	return out
}

// promAPI queries a Prometheus server inside a node namespace.
type promAPI struct {
	base string
	http *http.Client
}

// startPrometheus runs a Prometheus server inside n's namespace that scrapes n's weftd every
// second, and stops it when the test ends.
func startPrometheus(t *testing.T, server string, n *cluster.Node) promAPI {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: weft
    scrape_timeout: 1s
    static_configs:
      - targets: ['127.0.0.1:%d']
`, cluster.HealthzPort)
	confPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "prometheus.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	listen := fmt.Sprintf("127.0.0.1:%d", promPort)
	cmd := exec.Command("ip", "netns", "exec", n.NS, server,
		"--config.file="+confPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting prometheus in %s: %v", n.NS, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			log, _ := os.ReadFile(logPath)
			t.Logf("prometheus log:\n%s", log)
		}
	})

	api := promAPI{base: "http://" + listen, http: httpIn(n.NS)}
	for start := time.Now(); ; time.Sleep(200 * time.Millisecond) {
		resp, err := api.http.Get(api.base + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				t.Logf("prometheus ready in %s after %v", n.NS, time.Since(start).Round(time.Millisecond))
				return api
			}
		}
		select {
		case <-done:
			log, _ := os.ReadFile(logPath)
			t.Fatalf("prometheus exited (%v):\n%s", cmd.ProcessState, log)
		default:
		}
		if time.Since(start) > promTimeout {
			t.Fatalf("prometheus not ready after %v (%v)", promTimeout, err)
		}
	}
}

// promSample is one series of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

func (s promSample) value() string {
	v, _ := s.Value[1].(string)
	return v
}

func (p promAPI) query(q string) ([]promSample, error) {
	resp, err := p.http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %s: %d %s: %w", q, resp.StatusCode, body, err)
	}
	if r.Status != "success" || r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: status %s, result type %s: %s", q, r.Status, r.Data.ResultType, r.Error)
	}
	return r.Data.Result, nil
}

// httpIn is an HTTP client whose connections are made inside the named network namespace.
func httpIn(ns string) *http.Client {
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			DisableKeepAlives: true,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				return dialInNetns(ctx, ns, network, addr)
			},
		},
	}
}

// dialInNetns dials from a thread moved into the namespace and back; the socket stays in
// the namespace for its life. The thread must return and be unlocked: were it to end, the
// processes it happened to start (weftd, with Pdeathsig) would be killed with it.
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	target, err := netns.GetFromName(ns)
	if err != nil {
		return nil, fmt.Errorf("opening network namespace %s: %w", ns, err)
	}
	defer target.Close()
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("reading this thread's network namespace: %w", err)}
			return
		}
		defer origin.Close()
		if err := netns.Set(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("entering network namespace %s: %w", ns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		if serr := netns.Set(origin); serr != nil {
			// Left locked, the thread ends with this goroutine rather than serve others from
			// the wrong namespace.
			if c != nil {
				c.Close()
			}
			ch <- result{nil, fmt.Errorf("leaving network namespace %s: %w", ns, serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
