package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/weftnet/weft/e2e/cluster"
)

// TestWeftCNI: pods made through the weft CNI plugin (the real bridge and host-local as its
// delegates, configured from subnet.env) reach each other across nodes and a pod made by the
// bridge plugin directly; CHECK passes, and still passes after weftd restarts on their node
// (SIGTERM, then SIGKILL); DEL then removes each pod and the delegate configuration weft kept
// for it.
func TestWeftCNI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		if bins.weftCNI == "" {
			t.Skip("the weft CNI plugin is missing: the repository has no cmd/weft and " + envWeftCNI + " is not set")
		}
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2")
		var pods []*cluster.Pod
		for _, n := range nodes {
			p, err := c.AddWeftPod(n, fmt.Sprintf("w%d", n.Index))
			if err != nil {
				t.Fatal(err)
			}
			if sn := mustSubnet(t, n); !sn.Contains(p.IP) {
				t.Errorf("pod %s on node %s has %s; want an address of the node subnet %s", p.Name, n.Name, p.IP, sn)
			}
			pods = append(pods, p)
		}
		direct := addPod(t, c, nodes[1], "d2")
		pingAll(t, append(pods, direct))
		checkAll(t, pods)

		restarted := nodes[0]
		for _, s := range []struct {
			name string
			sig  syscall.Signal
		}{{"SIGTERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}} {
			if _, err := restarted.Stop(s.sig); err != nil {
				t.Fatal(err)
			}
			if err := restarted.Start(); err != nil {
				t.Fatal(err)
			}
			if err := restarted.WaitReady(readyTimeout); err != nil {
				t.Fatal(err)
			}
			checkAll(t, pods)
			t.Logf("CHECK of every weft pod passes after weftd on %s restarted after %s", restarted.Name, s.name)
		}
		pingAll(t, append(pods, direct))

		for _, p := range pods {
			if err := p.Delete(); err != nil {
				t.Fatal(err)
			}
			kept := filepath.Join(p.Node.WeftDataDir(), p.ContainerID())
			if _, err := os.Stat(kept); !os.IsNotExist(err) {
				t.Errorf("pod %s: delegate config %s after DEL: %v; want it gone", p.Name, kept, err)
			}
		}
		// The directly made pod, on the same bridge, is untouched by their going.
		if err := direct.Check(); err != nil {
			t.Fatal(err)
		}
	})
}

// checkAll runs a CNI CHECK of every pod.
func checkAll(t *testing.T, pods []*cluster.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := p.Check(); err != nil {
			t.Fatal(err)
		}
	}
}
