package soak

import (
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
	cfg := testPlanConfig()
	kinds := map[Kind]int{}
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
				kinds[f.Kind]++
				if f.At < 0 || f.At+f.For > p.Length {
					t.Errorf("seed %d phase %d: %v outside the phase's %v", seed, pi+1, f, p.Length)
				}
				if i > 0 && f.At < p.Faults[i-1].At {
					t.Errorf("seed %d phase %d: %v before %v", seed, pi+1, f, p.Faults[i-1])
				}
				spec := kindSpecs[f.Kind]
				if spec.nodes == 1 && len(f.Nodes) != 1 || spec.nodes < 0 && len(f.Nodes) < 2 {
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
				if down > cfg.Members-1 {
					t.Errorf("seed %d: %d etcd members down when %v starts", seed, down, f)
				}
			}
		}
		if total != cfg.Duration {
			t.Errorf("seed %d: phases last %v in all, want %v", seed, total, cfg.Duration)
		}
	}
	for _, k := range AllKinds() {
		if kinds[k] == 0 {
			t.Errorf("no %s drawn in 20 schedules", k)
		}
	}
	if overlaps == 0 {
		t.Error("no two faults overlap in 20 schedules")
	}
	t.Logf("kinds drawn in 20 schedules of %v: %v; %d overlapping pairs", cfg.Duration, kinds, overlaps)
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
