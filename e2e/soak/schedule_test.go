package soak

import (
	"slices"
	"testing"
	"time"
)

func testPlanConfig() PlanConfig {
	return PlanConfig{Duration: 30 * time.Minute, Phase: 3 * time.Minute, Nodes: 4, Members: 3}
}

// TestPlanReplays: a seed gives the same schedule every time, another seed another.
func TestPlanReplays(t *testing.T) {
	a, err := Plan(42, testPlanConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Plan(42, testPlanConfig())
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("seed 42 planned twice differs:\n%s\n%s", a, b)
	}
	c, err := Plan(43, testPlanConfig())
	if err != nil {
		t.Fatal(err)
	}
	if a.String() == c.String() {
		t.Errorf("seeds 42 and 43 planned the same schedule:\n%s", a)
	}
}

// TestPlanRules checks what Plan promises over many seeds: each fault within its phase, no
// resource held by two faults at once, at most two etcd members of three down, every kind
// drawn, faults overlapping.
func TestPlanRules(t *testing.T) {
	checkPlanRules(t, testPlanConfig(), Kinds(Etcd))
}

// TestPlanKube checks the same of Kubernetes mode's kinds, on its sole etcd member: only
// those kinds drawn, and each of them; the API server's faults never overlap one another nor
// a fault of the etcd it needs to start again; a tampering names two nodes, the tampered and
// the impersonated.
func TestPlanKube(t *testing.T) {
	cfg := testPlanConfig()
	cfg.Members = 1
	kinds := Kinds(Kube)
	for _, k := range []Kind{EtcdLeaderKill, EtcdQuorumLoss, LeaseChurn, HostileLeases} {
		if slices.Contains(kinds, k) {
			t.Errorf("Kubernetes mode draws %s, which needs etcd mode's leases or three members", k)
		}
	}
	checkPlanRules(t, cfg, kinds)
	cfg.Kinds = kinds
	apiserver := 0
	for seed := range uint64(20) {
		s, err := Plan(seed, cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range s.Phases {
			for i, f := range p.Faults {
				if f.Kind == AnnotationTamper && (len(f.Nodes) != 2 || f.Nodes[0] == f.Nodes[1]) {
					t.Errorf("seed %d: %v: want two nodes", seed, f)
				}
				if f.Kind != APIServerKill && f.Kind != APIServerFreeze {
					continue
				}
				apiserver++
				for _, g := range p.Faults[i+1:] {
					if g.At >= f.At+f.For {
						continue
					}
					if g.Kind == APIServerKill || g.Kind == APIServerFreeze || kindSpecs[g.Kind].members > 0 {
						t.Errorf("seed %d: %v overlaps %v", seed, f, g)
					}
				}
			}
		}
	}
	if apiserver == 0 {
		t.Error("no API server fault in 20 schedules")
	}
}

// TestPlanEtcdKinds: etcd mode draws from these kinds, in a fixed order. Plan draws a kind by
// its index among them, so a kind added changes every etcd-mode seed's schedule: the leader's
// partition did (the seeds of earlier notes replay other faults since), and this list makes
// such a change a decision. Kubernetes mode's kinds did not change etcd mode's.
func TestPlanEtcdKinds(t *testing.T) {
	want := []Kind{DatastoreCut, EtcdCompact, EtcdKill, EtcdLeaderKill, EtcdLeaderPartition, EtcdQuorumLoss, EtcdFreeze, EtcdTerm,
		HostileLeases, LeaseChurn, RouteDelete, MTUChange, VXLANDelete, WeftdKill, WeftdKillMany, WeftdFreeze, WeftdTerm}
	slices.Sort(want)
	if got := Kinds(Etcd); !slices.Equal(got, want) {
		t.Errorf("Kinds(Etcd) = %v; want %v", got, want)
	}
	a, err := Plan(22, PlanConfig{Duration: 45 * time.Second, Nodes: 4, Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Plan(22, PlanConfig{Duration: 45 * time.Second, Nodes: 4, Members: 3, Kinds: want})
	if err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("the default kinds plan another schedule than etcd mode's:\n%s\n%s", a, b)
	}
}

// checkPlanRules checks Plan's promises over 20 seeds of cfg drawing kinds.
func checkPlanRules(t *testing.T, cfg PlanConfig, kinds []Kind) {
	t.Helper()
	cfg.Kinds = kinds
	drawn := map[Kind]int{}
	overlaps := 0
	for seed := range uint64(20) {
		s, err := Plan(seed, cfg)
		if err != nil {
			t.Fatal(err)
		}
		var total time.Duration
		for pi, p := range s.Phases {
			total += p.Length
			for i, f := range p.Faults {
				drawn[f.Kind]++
				if !slices.Contains(kinds, f.Kind) {
					t.Errorf("seed %d: %v drawn; not among %v", seed, f, kinds)
				}
				if f.At < 0 || f.At+f.For > p.Length {
					t.Errorf("seed %d phase %d: %v outside the phase's %v", seed, pi+1, f, p.Length)
				}
				if i > 0 && f.At < p.Faults[i-1].At {
					t.Errorf("seed %d phase %d: %v before %v", seed, pi+1, f, p.Faults[i-1])
				}
				spec := kindSpecs[f.Kind]
				if spec.nodes > 0 && len(f.Nodes) != spec.nodes || spec.nodes < 0 && len(f.Nodes) < 2 {
					t.Errorf("seed %d: %v touches nodes %v", seed, f, f.Nodes)
				}
				for _, g := range p.Faults[i+1:] {
					if g.At >= f.At+f.For {
						continue
					}
					overlaps++
					for _, r := range f.holds(cfg.Members) {
						for _, q := range g.holds(cfg.Members) {
							if r == q {
								t.Errorf("seed %d: %v and %v both hold %s", seed, f, g, r)
							}
						}
					}
				}
				// Members down when f starts: those of every fault in force then.
				down := 0
				for _, g := range p.Faults {
					if g.At <= f.At && f.At < g.At+g.For {
						down += kindSpecs[g.Kind].members
					}
				}
				// A quorum of three or more stays; a sole member may go.
				most := cfg.Members - 1
				if cfg.Members < 3 {
					most = cfg.Members
				}
				if down > most {
					t.Errorf("seed %d: %d etcd members of %d down when %v starts", seed, down, cfg.Members, f)
				}
			}
		}
		if total != cfg.Duration {
			t.Errorf("seed %d: phases last %v in all, want %v", seed, total, cfg.Duration)
		}
	}
	for _, k := range kinds {
		if drawn[k] == 0 {
			t.Errorf("no %s drawn in 20 schedules", k)
		}
	}
	if overlaps == 0 {
		t.Error("no two faults overlap in 20 schedules")
	}
	t.Logf("kinds drawn in 20 schedules of %v: %v; %d overlapping pairs", cfg.Duration, drawn, overlaps)
}

// TestPlanKinds: only the kinds asked for are drawn, and an unknown one is refused.
func TestPlanKinds(t *testing.T) {
	cfg := testPlanConfig()
	cfg.Kinds = []Kind{WeftdKill, LeaseChurn}
	s, err := Plan(7, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for k, n := range s.Count() {
		if k != WeftdKill && k != LeaseChurn {
			t.Errorf("%d faults of %s drawn; asked for %v", n, k, cfg.Kinds)
		}
	}
	if len(s.Count()) != 2 {
		t.Errorf("drawn %v; want both kinds asked for", s.Count())
	}
	cfg.Kinds = []Kind{"meteor"}
	if _, err := Plan(7, cfg); err == nil {
		t.Error("Plan took the unknown kind meteor")
	}
}
