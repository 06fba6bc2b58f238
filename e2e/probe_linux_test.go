package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/status"
)

// TestOverlayProbes: each weftd probes its peers through the tunnel it programmed. n1's
// underlay path to n3 is cut (a blackhole route in n1's namespace): n1 finds n3 unreachable
// within seconds, lists it in /status with since when, counts it in weft_peers_unreachable,
// and stays ready (n2 answers); cut from n2 too, n1 answers none of its peers and /readyz
// says so. When the paths return, every peer answers again. A pod pings between n2 and n3
// all along: the probes cost their traffic nothing.
func TestOverlayProbes(t *testing.T) {
	bins := needBinaries(t)
	c := newCluster(t, bins, backends()[0])
	nodes := startNodes(t, c, "n1", "n2", "n3")
	pods := onePodEach(t, c, nodes)
	pingAll(t, pods)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	key3 := leaseOf(t, c, mustSubnet(t, n3)).Key()
	overlay := func(n *cluster.Node) status.Node {
		t.Helper()
		var st status.Node
		if err := json.Unmarshal([]byte(mustGet(t, n, "/status")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	until := func(what string, n *cluster.Node, cond func(status.Node) bool) time.Duration {
		t.Helper()
		start := time.Now()
		for {
			st := overlay(n)
			if cond(st) {
				return time.Since(start)
			}
			if time.Since(start) > convergeTimeout {
				t.Fatalf("%s: %s not seen within %v: overlay %+v, unreachable %+v", n.Name, what, convergeTimeout, st.Overlay, st.Unreachable)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	until("every peer answering", n1, func(st status.Node) bool {
		return st.Overlay != nil && st.Overlay.Peers == 2 && st.Overlay.Answered == 2
	})

	run, err := cluster.StartPing(pods[1], pods[2].IP, 1500, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	nodeExec(t, n1, "ip", "route", "add", "blackhole", n3.IP.String()+"/32")
	cut := time.Now()
	took := until("n3 unreachable", n1, func(st status.Node) bool {
		return len(st.Unreachable) == 1 && st.Unreachable[0].Key == key3
	})
	st := overlay(n1)
	u := st.Unreachable[0]
	t.Logf("n1 found n3 unreachable %v after the cut: %+v; overlay %+v", took.Round(time.Millisecond), u, *st.Overlay)
	if u.Since.Before(cut.Add(-time.Second)) || u.Address != mustSubnet(t, n3).Addr().String() || u.Error == "" {
		t.Errorf("n1's entry for n3: %+v; want since the cut, the VTEP address %s, an error", u, mustSubnet(t, n3).Addr())
	}
	if !strings.Contains(mustGet(t, n1, "/metrics"), "\nweft_peers_unreachable 1\n") {
		t.Errorf("n1's /metrics lacks weft_peers_unreachable 1")
	}
	if code, body, _ := n1.Get("/readyz"); code != 200 {
		t.Errorf("n1 not ready with one peer of two unreachable: %d %s", code, body)
	}

	nodeExec(t, n1, "ip", "route", "add", "blackhole", n2.IP.String()+"/32")
	why := waitReadyz(t, n1, 503, convergeTimeout)
	if !strings.Contains(why, "overlay") {
		t.Errorf("n1's /readyz cut off from every peer: %q; want it to name the overlay", why)
	}
	t.Logf("n1 cut off from every peer: /readyz %q", why)

	for _, n := range []*cluster.Node{n2, n3} {
		nodeExec(t, n1, "ip", "route", "del", "blackhole", n.IP.String()+"/32")
	}
	healed := time.Now()
	waitReadyz(t, n1, 200, convergeTimeout)
	for _, n := range nodes {
		until("every peer answering again", n, func(st status.Node) bool {
			return st.Overlay != nil && st.Overlay.Answered == 2 && len(st.Unreachable) == 0
		})
	}
	t.Logf("every node reaches every peer again %v after the paths returned", time.Since(healed).Round(time.Millisecond))
	sent, recv, err := run.Wait()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ping %s -> %s every 10 ms meanwhile: %d sent, %d lost", pods[1].Name, pods[2].Name, sent, sent-recv)
	if recv != sent {
		t.Errorf("%d of %d pings between n2 and n3 lost", sent-recv, sent)
	}
	if !slices.ContainsFunc(strings.Split(mustGet(t, n2, "/metrics"), "\n"), func(l string) bool {
		return strings.HasPrefix(l, `weft_probes_total{kind="icmp",outcome="ok"} `)
	}) {
		t.Errorf("n2's /metrics has no weft_probes_total of answered probes")
	}
}
