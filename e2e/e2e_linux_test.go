package e2e

import (
	"encoding/json"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
)

// TestPodToPod: three nodes, a pod on each, every pod pings every other across nodes and a
// TCP stream passes; leases, subnet.env and the VXLAN device are what flannel would make.
func TestPodToPod(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2", "n3")

		wantMTU := 1500
		if b.vxlan() {
			wantMTU = 1450 // the underlay's 1500 less VXLAN's 50
		}
		seen := map[netip.Prefix]string{}
		for _, n := range nodes {
			env, err := n.SubnetEnv()
			if err != nil {
				t.Fatal(err)
			}
			sn := env.Subnet.Masked()
			if env.Network != netip.MustParsePrefix("10.244.0.0/16") || sn.Bits() != 24 ||
				!env.Network.Contains(sn.Addr()) || env.MTU != wantMTU {
				t.Errorf("node %s subnet.env: %+v; want Network 10.244.0.0/16, a /24 in it, MTU %d", n.Name, env, wantMTU)
			}
			if other, dup := seen[sn]; dup {
				t.Errorf("nodes %s and %s both have subnet %s", other, n.Name, sn)
			}
			seen[sn] = n.Name

			l := leaseOf(t, c, sn)
			if l.Attrs.PublicIP != n.IP || l.Attrs.BackendType != b.name {
				t.Errorf("node %s lease %s: PublicIP %s BackendType %q; want %s %q",
					n.Name, l.Key(), l.Attrs.PublicIP, l.Attrs.BackendType, n.IP, b.name)
			}
			if b.vxlan() {
				mac := vtepMAC(t, l)
				var links []struct {
					Address string `json:"address"`
					MTU     int    `json:"mtu"`
				}
				out := nodeExec(t, n, "ip", "-j", "link", "show", vxlanDevice)
				if err := json.Unmarshal([]byte(out), &links); err != nil || len(links) != 1 {
					t.Fatalf("node %s: ip -j link show %s: %q (%v)", n.Name, vxlanDevice, out, err)
				}
				if links[0].Address != mac || links[0].MTU != wantMTU {
					t.Errorf("node %s: %s has MAC %s MTU %d; lease VtepMAC %s, want MTU %d",
						n.Name, vxlanDevice, links[0].Address, links[0].MTU, mac, wantMTU)
				}
			}
		}

		pods := onePodEach(t, c, nodes)
		pingAll(t, pods)
		stream(t, pods[0], pods[1])
		stream(t, pods[2], pods[0])
	})
}

// TestLateJoin: a node that joins a running cluster becomes reachable from the pods already
// there, and reaches them.
func TestLateJoin(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2")
		pods := onePodEach(t, c, nodes)
		pingAll(t, pods)

		late := startNodes(t, c, "n3")
		lp := addPod(t, c, late[0], "p3")
		for _, p := range pods {
			waitReachable(t, p, lp, convergeTimeout)
			waitReachable(t, lp, p, convergeTimeout)
		}
		stream(t, pods[0], lp)
	})
}

// TestLeaseDeleted: when a stopped node's lease is deleted from etcd, the other nodes stop
// routing to its subnet (and, with vxlan, drop its neighbour and FDB entries).
func TestLeaseDeleted(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2", "n3")
		pods := onePodEach(t, c, nodes)
		pingAll(t, pods)

		gone := nodes[2]
		sn := mustSubnet(t, gone)
		mac := ""
		if b.vxlan() {
			mac = vtepMAC(t, leaseOf(t, c, sn))
		}
		for _, n := range nodes[:2] {
			if d := peerState(t, n, sn, mac); d.route == "" || (b.vxlan() && (d.neigh == "" || d.fdb == "")) {
				t.Fatalf("node %s before the lease of %s is deleted: %v; want all present", n.Name, sn, d)
			}
		}

		// Stopped first, or it would notice the loss of its lease and take it again.
		if _, err := gone.Stop(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := c.DeleteLease(sn); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for _, n := range nodes[:2] {
			for {
				d := peerState(t, n, sn, mac)
				if d == (dataPlane{}) {
					break
				}
				if time.Since(start) > convergeTimeout {
					t.Fatalf("node %s still has, %v after the lease of %s was deleted: %v", n.Name, convergeTimeout, sn, d)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf("the lease of %s was forgotten by the other nodes within %v", sn, time.Since(start).Round(time.Millisecond))

		if sent, recv, err := cluster.Ping(pods[0], pods[2].IP, 2, 20*time.Millisecond); err != nil || recv != 0 {
			t.Errorf("ping to the pod of the removed node: %d of %d answered (%v); want none", recv, sent, err)
		}
		waitReachable(t, pods[0], pods[1], convergeTimeout) // the others are untouched
	})
}

// TestRestartKeepsTraffic: restarting weftd, after SIGTERM or SIGKILL, loses not one packet
// of a ping every 10 ms that crosses the restarted node, because weftd leaves the data plane
// programmed when it stops and adopts it when it starts.
func TestRestartKeepsTraffic(t *testing.T) {
	// At -i 0.01 ping sends about 62 requests a second here (100 at most anywhere): 250
	// last 2.5 to 4 s, which must cover some traffic before the stop, the stop, the start,
	// readiness (0.1 s here) and a settling second; the test fails if they do not.
	const count = 250
	const interval = 10 * time.Millisecond
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2", "n3")
		pods := onePodEach(t, c, nodes)
		pingAll(t, pods)
		restarted, from, to := nodes[0], pods[1], pods[0]

		for _, s := range []struct {
			name string
			sig  syscall.Signal
		}{{"SIGTERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}} {
			t.Run(s.name, func(t *testing.T) {
				sent, recv := restartUnderPing(t, restarted, from, to.IP, s.sig, count, interval)
				if sent != count || recv != sent {
					t.Errorf("%d of %d pings lost across the restart", sent-recv, sent)
				}
			})
		}
	})
}

// restartUnderPing restarts weftd on n with sig while from pings to every interval (count
// pings, which must outlast the stop, the start, readiness and a settling second: the test
// fails if they do not), requires a clean exit after SIGTERM, logs the timings, and returns the
// pings sent and answered.
func restartUnderPing(t *testing.T, n *cluster.Node, from *cluster.Pod, to netip.Addr, sig syscall.Signal, count int, interval time.Duration) (sent, recv int) {
	t.Helper()
	run, err := cluster.StartPing(from, to, count, interval)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // some traffic before the stop
	start := time.Now()
	state, err := n.Stop(sig)
	if err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(start)
	if sig == syscall.SIGTERM && !state.Success() {
		t.Errorf("weftd on %s exited with %v after SIGTERM; want status 0", n.Name, state)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitReady(readyTimeout); err != nil {
		t.Fatal(err)
	}
	ready := time.Since(start)
	time.Sleep(time.Second) // the restarted weftd settles while traffic flows
	window := time.Since(start)
	select {
	case <-run.Done():
		t.Fatalf("the ping ended before the restart window (%v) did: raise its count", window)
	default:
	}
	sent, recv, err = run.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("weftd on %s: %v, exited (%v) after %v, ready again after %v, watched for %v; ping %s -> %s: %d transmitted, %d received",
		n.Name, sig, state, stopped.Round(time.Millisecond), ready.Round(time.Millisecond),
		window.Round(time.Millisecond), from.Name, to, sent, recv)
	return sent, recv
}

// TestDriftRepaired: a route, a neighbour and an FDB entry deleted by hand on a node come
// back by themselves, and traffic flows again.
func TestDriftRepaired(t *testing.T) {
	forEachBackend(t, func(t *testing.T, bins binaries, b backend) {
		c := newCluster(t, bins, b)
		nodes := startNodes(t, c, "n1", "n2")
		pods := onePodEach(t, c, nodes)
		pingAll(t, pods)

		n, peer := nodes[0], nodes[1]
		sn := mustSubnet(t, peer)
		mac := ""
		if b.vxlan() {
			mac = vtepMAC(t, leaseOf(t, c, sn))
		}
		want := peerState(t, n, sn, mac)
		if want.route == "" || (b.vxlan() && (want.neigh == "" || want.fdb == "")) {
			t.Fatalf("node %s before any change: %v; want all present", n.Name, want)
		}

		type drift struct {
			what string
			del  []string
			back func(dataPlane) bool
		}
		drifts := []drift{{
			"route", []string{"ip", "route", "del", sn.String()},
			func(d dataPlane) bool { return d.route == want.route },
		}}
		if b.vxlan() {
			drifts = append(drifts,
				drift{"neighbour", []string{"ip", "neigh", "del", sn.Addr().String(), "dev", vxlanDevice},
					func(d dataPlane) bool { return d.neigh == want.neigh }},
				drift{"FDB entry", []string{"bridge", "fdb", "del", mac, "dev", vxlanDevice, "dst", peer.IP.String(), "self"},
					func(d dataPlane) bool { return d.fdb == want.fdb }},
			)
		}
		for _, d := range drifts {
			nodeExec(t, n, d.del...)
			start := time.Now()
			for !d.back(peerState(t, n, sn, mac)) {
				if time.Since(start) > repairTimeout {
					t.Fatalf("node %s: the %s for %s deleted by hand is not back after %v: %v; want %v",
						n.Name, d.what, sn, repairTimeout, peerState(t, n, sn, mac), want)
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("node %s: the %s for %s came back after %v", n.Name, d.what, sn, time.Since(start).Round(time.Millisecond))
			waitReachable(t, pods[0], pods[1], convergeTimeout)
		}
	})
}
