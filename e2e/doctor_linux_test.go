package e2e

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/weftnet/weft/ctl"
	"github.com/weftnet/weft/e2e/cluster"
)

// TestDoctorModes: weftctl doctor, run on a node with weftd's own flags, in each mode the
// README lists as done: etcd and Kubernetes (a real kube-apiserver, as weftd's service
// account), IPv4, dual-stack and IPv6-only, vxlan and host-gw. On a healthy node it finds no
// problem and has checked every family's routes; with weftd stopped and the route to the
// peer's subnet of the last family deleted, it finds exactly that (with its family) and
// weftd not answering. weftctl leases lists both nodes' leases from the same datastore (in
// Kubernetes mode by Node).
func TestDoctorModes(t *testing.T) {
	bins := needBinaries(t)
	tools := buildTools(t)
	const (
		v4     = `"Network":"10.244.0.0/16",`
		dual   = `"Network":"10.244.0.0/16","EnableIPv6":true,"IPv6Network":"` + ipv6Network + `",`
		v6only = `"EnableIPv4":false,"EnableIPv6":true,"IPv6Network":"` + ipv6Network + `",`
	)
	for _, m := range []struct {
		name, conf string
		kube       bool
	}{
		{"etcd IPv4 vxlan", `{` + v4 + `"Backend":{"Type":"vxlan"}}`, false},
		{"etcd dual-stack host-gw", `{` + dual + `"Backend":{"Type":"host-gw"}}`, false},
		{"etcd IPv6-only vxlan", `{` + v6only + `"Backend":{"Type":"vxlan"}}`, false},
		{"Kubernetes IPv4 host-gw", `{` + v4 + `"Backend":{"Type":"host-gw"}}`, true},
		{"Kubernetes dual-stack vxlan", `{` + dual + `"Backend":{"Type":"vxlan"}}`, true},
		{"Kubernetes IPv6-only host-gw", `{` + v6only + `"Backend":{"Type":"host-gw"}}`, true},
	} {
		t.Run(strings.ReplaceAll(m.name, " ", "_"), func(t *testing.T) {
			b := backend{name: m.name, netConf: m.conf}
			var nodes []*cluster.Node
			var env []string
			if m.kube {
				needKubeAPIServer(t)
				kc := newKubeCluster(t, bins, b, bins.weftd)
				for i := 1; i <= 2; i++ {
					var cidrs []netip.Prefix
					if strings.Contains(m.conf, `"Network"`) {
						cidrs = append(cidrs, podCIDR(i))
					}
					if strings.Contains(m.conf, `"IPv6Network"`) {
						cidrs = append(cidrs, netip.MustParsePrefix(fmt.Sprintf("fd00:10:244:%d::/64", i)))
					}
					kc.createNode(t, fmt.Sprintf("n%d", i), cidrs...)
				}
				nodes = startNodes(t, kc.Cluster, "n1", "n2")
				env = []string{"NODE_NAME=n1"} // as the DaemonSet gives weftd's container
			} else {
				nodes = startNodes(t, newCluster(t, bins, b), "n1", "n2")
			}
			n1, n2 := nodes[0], nodes[1]
			env2, err := n2.SubnetEnv()
			if err != nil {
				t.Fatal(err)
			}
			var peer []netip.Prefix // n2's subnets, IPv4 first
			fams := []string{}
			for _, sn := range []netip.Prefix{env2.Subnet.Masked(), env2.IPv6Subnet.Masked()} {
				if sn.IsValid() {
					peer = append(peer, sn)
					waitRoute(t, n1, sn)
					fams = append(fams, map[bool]string{false: "", true: "IPv6"}[sn.Addr().Is6()])
				}
			}

			// weftd's flags but those of its health server, whose address is the doctor's default.
			args := []string{"doctor", "-o", "json"}
			for _, a := range n1.WeftdArgs() {
				if !strings.HasPrefix(a, "--healthz-") {
					args = append(args, a)
				}
			}
			doctor := func() (ctl.DoctorReport, int) {
				t.Helper()
				out, stderr, code := tools.weftctlEnv(t, n1, env, args...)
				var rep ctl.DoctorReport
				if err := json.Unmarshal([]byte(out), &rep); err != nil {
					t.Fatalf("weftctl %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out, stderr)
				}
				t.Logf("weftctl doctor on %s: exit %d, %s", n1.Name, code, out)
				return rep, code
			}
			rep, code := doctor()
			if code != 0 || rep.Problems != 0 {
				t.Fatalf("doctor on a healthy node: exit %d, %d problems; want none", code, rep.Problems)
			}
			for _, fam := range fams {
				if !slices.ContainsFunc(rep.Findings, func(f ctl.Finding) bool {
					return f.Check == "route" && f.Family == fam && f.Result == "ok" && f.What == "1 as the leases say"
				}) {
					t.Errorf("no route check of family %q found the route to the peer", fam)
				}
			}

			// weftctl leases reads the same datastore with weftd's flags for it.
			largs := []string{"leases", "-o", "json"}
			for _, a := range n1.WeftdArgs() {
				for _, p := range []string{"--etcd-", "--kube-", "--kubeconfig-", "--net-config-"} {
					if strings.HasPrefix(a, p) {
						largs = append(largs, a)
					}
				}
			}
			out, stderr, code := tools.weftctlEnv(t, n1, env, largs...)
			var rows []ctl.LeaseRow
			if err := json.Unmarshal([]byte(out), &rows); err != nil || code != 0 || len(rows) != 2 {
				t.Errorf("weftctl %s: exit %d, %v, %d leases; want the two nodes'\n%s%s", strings.Join(largs, " "), code, err, len(rows), out, stderr)
			} else if m.kube && (rows[0].Key != "n1" || rows[1].Key != "n2") {
				t.Errorf("weftctl leases in Kubernetes mode: keys %q %q, want the Nodes n1 and n2", rows[0].Key, rows[1].Key)
			}

			if _, err := n1.Stop(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			gone := peer[len(peer)-1]
			nodeExec(t, n1, "ip", "route", "del", gone.String())
			rep, code = doctor()
			var failed []string
			for _, f := range rep.Findings {
				if f.Result == "fail" {
					failed = append(failed, strings.TrimSpace(f.Check+" "+f.Family)+": "+f.What)
				}
			}
			want := []string{"weftd: no answer", strings.TrimSpace("route "+fams[len(fams)-1]) + ": missing: " + gone.String()}
			if code != ctl.ExitProblems || len(failed) != 2 || !strings.HasPrefix(failed[0], want[0]) || !strings.HasPrefix(failed[1], want[1]) {
				t.Errorf("doctor with weftd stopped and the route to %s deleted: exit %d, failures:\n  %s\nwant:\n  %s...",
					gone, code, strings.Join(failed, "\n  "), strings.Join(want, "...\n  "))
			}
		})
	}
}
