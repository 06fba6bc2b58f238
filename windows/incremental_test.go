package windows

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"github.com/weftnet/weft/backend"
)

// TestIncrementalPolicies: once a full Apply has listed the network, a peer's change is one
// RemoteSubnetRoute request (two when the policy changes), with no lookup or listing of
// HNS; and any sequence of such changes leaves HNS exactly as a full Apply would.
func TestIncrementalPolicies(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, Config{})
	n.mustAcquire("10.244.1.0/24")
	b := n.backend()
	set := backend.NewSet(b, n.own, false)
	var r backend.Result
	a := vxlanLease(t, "10.244.2.0/24", "192.168.1.11", "c6:d2:32:6f:8f:44")
	set.Put(a, &r)
	if _, err := n.plane.Apply(t.Context(), set.State(), backend.Update{Full: true}); err != nil {
		t.Fatal(err)
	}
	n.hns.ResetRequests()

	apply := func(what string, r backend.Result, wantOps string) {
		t.Helper()
		if _, err := n.plane.Apply(t.Context(), set.State(), backend.Update{Peers: r.Changes}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		var ops []string
		for _, q := range n.hns.Requests() {
			ops = append(ops, q.Op+" "+requestKind(q))
		}
		if got := strings.Join(ops, ", "); got != wantOps {
			t.Errorf("%s: requests %q, want %q", what, got, wantOps)
		}
		if reads := n.hns.Reads(); reads != 0 {
			t.Errorf("%s: %d lookups or listings of HNS, want none", what, reads)
		}
		n.hns.ResetRequests()
	}
	r = backend.Result{}
	c := vxlanLease(t, "10.244.3.0/24", "192.168.1.12", "6e:11:22:33:44:55")
	set.Put(c, &r)
	apply("a peer joins", r, "ModifyNetworkSettings add")
	r = backend.Result{}
	moved := vxlanLease(t, "10.244.3.0/24", "192.168.1.13", "6e:11:22:33:44:55")
	set.Put(moved, &r)
	apply("a peer moves", r, "ModifyNetworkSettings remove, ModifyNetworkSettings add")
	r = backend.Result{}
	set.Remove(a.Key(), &r)
	apply("a peer leaves", r, "ModifyNetworkSettings remove")

	// Random joins, moves and leaves, applied one batch at a time, then a full Apply: it
	// finds nothing to do.
	rng := rand.New(rand.NewPCG(3, 4))
	for step := range 60 {
		r = backend.Result{}
		for range 1 + rng.IntN(3) {
			i := 2 + rng.IntN(12)
			l := vxlanLease(t, fmt.Sprintf("10.244.%d.0/24", i), fmt.Sprintf("192.168.1.%d", 20+rng.IntN(4)+4*i), fmt.Sprintf("6e:00:00:00:%02x:%02x", rng.IntN(3), i))
			if rng.IntN(3) == 0 {
				set.Remove(l.Key(), &r)
			} else {
				set.Put(l, &r)
			}
		}
		if _, err := n.plane.Apply(t.Context(), set.State(), backend.Update{Peers: r.Changes}); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	n.hns.ResetRequests()
	ch, err := n.plane.Apply(t.Context(), set.State(), backend.Update{Full: true})
	if err != nil || ch.Total() != 0 {
		t.Errorf("a full Apply after the incremental ones changed %v (%v), want nothing", ch, err)
	}
	net, _ := n.hns.NetworkByName("flannel.4096")
	if got, want := len(net.PoliciesOf(PolicyRemoteSubnetRoute)), set.State().Peers.Len(); got != want {
		t.Errorf("%d RemoteSubnetRoute policies, %d peers", got, want)
	}
}

// TestPrepareStopsWithContext: a stopping daemon does not sit out HNS's wait for the host
// network: Prepare returns with the context's error.
func TestPrepareStopsWithContext(t *testing.T) {
	n := newWinNode(t, mustConfig(t, vxlanConf), "192.168.1.10", hns10, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := n.plane.Prepare(ctx, n.backend().State(netip.MustParsePrefix("10.244.1.0/24"), false))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Prepare with a canceled context: %v, want context.Canceled", err)
	}
	if _, err := n.plane.Apply(ctx, n.desired(nil), backend.Update{Full: true}); !errors.Is(err, context.Canceled) {
		t.Errorf("Apply with a canceled context: %v, want context.Canceled", err)
	}
}

// requestKind says what a ModifyNetworkSettings request does ("add", "remove"), "" for others.
func requestKind(q Request) string {
	body := string(q.Body)
	switch {
	case q.Op != "ModifyNetworkSettings":
		return ""
	case strings.Contains(body, `"Add"`):
		return "add"
	case strings.Contains(body, `"Remove"`):
		return "remove"
	}
	return body
}
