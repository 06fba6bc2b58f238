package linux

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// noSysAdminEnv marks the child process of TestPlaneWithoutSysAdmin.
const noSysAdminEnv = "WEFT_TEST_PLANE_WITHOUT_SYS_ADMIN"

// TestPlaneWithoutSysAdmin: weftd's DaemonSet grants CAP_NET_ADMIN (and CAP_NET_RAW), not
// CAP_SYS_ADMIN, so the Plane must open its sockets without entering a namespace (setns needs
// CAP_SYS_ADMIN): under the DaemonSet on a real kubelet weftd failed at once with "failed to
// set into network namespace … operation not permitted". The test binary runs again in a
// namespace of its own with CAP_SYS_ADMIN dropped from its bounding set (setpriv), and there
// opens a Plane, programs a route, ensures weft's nftables forward chain and sees a route
// deleted by hand through its watch.
func TestPlaneWithoutSysAdmin(t *testing.T) {
	if os.Getenv(noSysAdminEnv) != "" {
		planeWithoutSysAdmin(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("no setpriv (util-linux): %v", err)
	}
	ns := fmt.Sprintf("weft-nosysadmin-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	run("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	run("-n", ns, "link", "add", "ul0", "type", "veth", "peer", "name", "ul1")
	run("-n", ns, "link", "set", "ul1", "up")
	run("-n", ns, "link", "set", "ul0", "up")
	run("-n", ns, "addr", "add", "192.168.50.1/24", "dev", "ul0")
	cmd := exec.Command("ip", "netns", "exec", ns, setpriv, "--bounding-set=-sys_admin", "--inh-caps=-sys_admin",
		os.Args[0], "-test.run=^TestPlaneWithoutSysAdmin$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), noSysAdminEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestPlaneWithoutSysAdmin") {
		t.Fatalf("the Plane without CAP_SYS_ADMIN: %v\n%s", err, out)
	}
}

// planeWithoutSysAdmin is the child: every thread in the test's namespace, no CAP_SYS_ADMIN.
func planeWithoutSysAdmin(t *testing.T) {
	if sysAdmin(t) {
		t.Fatal("the child still has CAP_SYS_ADMIN: the test would prove nothing")
	}
	p, err := New(testLog(t))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer p.Close()
	own := testOwn()
	own.Devices = []string{"ul0"}
	st := Want{Routes: []Route{hgRoute("10.244.2.0/24", "192.168.50.2")}}
	st.Routes[0].Dev = "ul0"
	if c, err := p.reconcile(st, own); err != nil || c != (Changes{RoutesAdded: 1}) {
		t.Fatalf("reconcile: %v %v", c, err)
	}
	m, err := p.nft()
	if err != nil {
		t.Fatalf("nftables: %v", err)
	}
	if _, err := m.EnsureForward(netip.MustParsePrefix("10.244.0.0/16"), false); err != nil {
		t.Fatalf("the forward chain: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	calls := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() { done <- p.Watch(ctx, func() { calls <- struct{}{} }) }()
	wait := func(what string) {
		t.Helper()
		select {
		case <-calls:
		case err := <-done:
			t.Fatalf("Watch returned %v while waiting for %s", err, what)
		case <-time.After(5 * time.Second):
			t.Fatalf("no call within 5s after %s", what)
		}
	}
	wait("subscribing")
	time.Sleep(200 * time.Millisecond)
	for len(calls) > 0 {
		<-calls
	}
	if err := netlink.RouteDel(&netlink.Route{Dst: ipNet(pfx("10.244.2.0/24"))}); err != nil {
		t.Fatal(err)
	}
	wait("a route deleted by hand")
}

// sysAdmin reports whether this process has CAP_SYS_ADMIN in its effective set.
func sysAdmin(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatalf("CapEff %q: %v", v, err)
			}
			const capSysAdmin = 21
			return caps&(1<<capSysAdmin) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}
