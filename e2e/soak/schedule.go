package soak

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind string

// The kinds of fault. Node faults name the nodes they touch (Fault.Nodes), etcd faults the
// members (Fault.Members); the others touch no node's data path.
const (
	// WeftdTerm stops a node's weftd with SIGTERM, and starts it again when the fault ends.
	WeftdTerm Kind = "weftd-sigterm"
	// WeftdKill kills a node's weftd, and starts it again when the fault ends.
	WeftdKill Kind = "weftd-sigkill"
	// WeftdKillMany kills the weftd of several nodes at once.
	WeftdKillMany Kind = "weftd-sigkill-many"
	// WeftdFreeze stops a node's weftd with SIGSTOP, and continues it when the fault ends.
	WeftdFreeze Kind = "weftd-sigstop"
	// EtcdKill kills an etcd member, and starts it again on its data when the fault ends.
	EtcdKill Kind = "etcd-member-sigkill"
	// EtcdTerm stops an etcd member with SIGTERM (a leader hands over first).
	EtcdTerm Kind = "etcd-member-sigterm"
	// EtcdFreeze stops an etcd member with SIGSTOP: it holds its connections and answers
	// nothing.
	EtcdFreeze Kind = "etcd-member-sigstop"
	// EtcdLeaderKill kills whichever member leads when the fault starts.
	EtcdLeaderKill Kind = "etcd-leader-sigkill"
	// EtcdLeaderPartition cuts whichever member leads when the fault starts off from the
	// other members (cluster.EtcdMember.Isolate): it keeps its clients, the others elect a
	// new leader, and it steps down with none to follow until the cut ends.
	EtcdLeaderPartition Kind = "etcd-leader-partitioned"
	// EtcdQuorumLoss kills two members of three: etcd serves nothing until one is back.
	EtcdQuorumLoss Kind = "etcd-quorum-loss"
	// EtcdCompact compacts etcd's history to its current revision, again and again: a
	// watch behind it (a node cut from etcd, a weftd frozen) finds its revision compacted
	// away when it resumes, and must list the leases afresh.
	EtcdCompact Kind = "etcd-compact"
	// DatastoreCut drops a node's packets to etcd's client port (nft in its namespace).
	DatastoreCut Kind = "datastore-cut"
	// LeaseChurn adds and deletes valid leases of nodes that do not exist on free subnets,
	// as nodes joining and leaving would; what it leaves stays.
	LeaseChurn Kind = "lease-churn"
	// HostileLeases writes unusable leases on free subnets (malformed values, bad
	// addresses, copies of a live node's public IP and VTEP MAC); they go when it ends.
	HostileLeases Kind = "hostile-leases"
	// VXLANDelete deletes a node's VXLAN device under its weftd.
	VXLANDelete Kind = "vxlan-device-deleted"
	// RouteDelete deletes a node's route to a peer under its weftd.
	RouteDelete Kind = "route-deleted"
	// MTUChange lowers a node's underlay MTU, and puts it back when the fault ends.
	MTUChange Kind = "underlay-mtu-changed"

	// The kinds of Kubernetes mode, where the leases are the Node objects' annotations.

	// APIServerKill kills the kube-apiserver, and starts it again when the fault ends.
	APIServerKill Kind = "apiserver-sigkill"
	// APIServerFreeze stops the kube-apiserver with SIGSTOP: it holds its connections and
	// answers nothing.
	APIServerFreeze Kind = "apiserver-sigstop"
	// NodeChurn creates and deletes Node objects of nodes that do not exist, with valid
	// leases on free subnets, as nodes joining and leaving would; what it leaves stays.
	NodeChurn Kind = "node-churn"
	// HostileNodes writes Node objects with unusable annotations (malformed backend-data,
	// bad addresses, a live node's public IP and VTEP MAC, a live node's podCIDR); they go
	// when it ends.
	HostileNodes Kind = "hostile-nodes"
	// AnnotationTamper overwrites a live node's own annotations (malformed backend-data,
	// another live node's public IP or VTEP MAC): its weftd must write them back. It touches
	// both nodes: the impostor's claim may win over the other's (the older claim wins).
	AnnotationTamper Kind = "own-annotations-tampered"
)

// Datastores a soak runs on.
const (
	Etcd = "etcd"
	Kube = "kube"
)

// kindSpec is how Plan schedules a kind.
type kindSpec struct {
	minFor, maxFor time.Duration
	// nodes is how many nodes it touches: 0, 1, or -1 for two up to all.
	nodes int
	// resource is the per-node resource it claims, exclusive: "weftd" or "net".
	resource string
	// members is how many etcd members it takes down: 0, 1 or 2 (the quorum of three).
	members int
	// allMembers: it claims every member (the leader is known only when it starts).
	allMembers bool
	// global is a resource of its own it claims, exclusive.
	global string
	// etcd, kube: the datastores it applies to.
	etcd, kube bool
	// keepsTraffic: the nodes it touches must lose no packet while it lasts. weftd stopped,
	// killed or frozen, or cut from its datastore, leaves the kernel as it was: the data path
	// does not depend on the daemon running (flannel's promise too).
	keepsTraffic bool
}

var kindSpecs = map[Kind]kindSpec{
	WeftdTerm:           {minFor: time.Second, maxFor: 8 * time.Second, nodes: 1, resource: "weftd", etcd: true, kube: true, keepsTraffic: true},
	WeftdKill:           {minFor: time.Second, maxFor: 8 * time.Second, nodes: 1, resource: "weftd", etcd: true, kube: true, keepsTraffic: true},
	WeftdKillMany:       {minFor: time.Second, maxFor: 6 * time.Second, nodes: -1, resource: "weftd", etcd: true, kube: true, keepsTraffic: true},
	WeftdFreeze:         {minFor: 2 * time.Second, maxFor: 10 * time.Second, nodes: 1, resource: "weftd", etcd: true, kube: true, keepsTraffic: true},
	EtcdKill:            {minFor: 2 * time.Second, maxFor: 12 * time.Second, members: 1, etcd: true, kube: true},
	EtcdTerm:            {minFor: 2 * time.Second, maxFor: 12 * time.Second, members: 1, etcd: true},
	EtcdFreeze:          {minFor: 2 * time.Second, maxFor: 12 * time.Second, members: 1, etcd: true, kube: true},
	EtcdLeaderKill:      {minFor: 2 * time.Second, maxFor: 10 * time.Second, members: 1, allMembers: true, etcd: true},
	EtcdLeaderPartition: {minFor: 2 * time.Second, maxFor: 12 * time.Second, members: 1, allMembers: true, etcd: true},
	EtcdQuorumLoss:      {minFor: 3 * time.Second, maxFor: 12 * time.Second, members: 2, etcd: true},
	EtcdCompact:         {minFor: 3 * time.Second, maxFor: 15 * time.Second, global: "compact", etcd: true, kube: true},
	DatastoreCut:        {minFor: 3 * time.Second, maxFor: 20 * time.Second, nodes: 1, resource: "net", etcd: true, kube: true, keepsTraffic: true},
	LeaseChurn:          {minFor: 3 * time.Second, maxFor: 15 * time.Second, global: "churn", etcd: true},
	HostileLeases:       {minFor: 3 * time.Second, maxFor: 15 * time.Second, global: "hostile", etcd: true},
	// The time given to weftd to repair what was deleted: the node counts as touched.
	VXLANDelete: {minFor: 8 * time.Second, maxFor: 8 * time.Second, nodes: 1, resource: "net", etcd: true, kube: true},
	RouteDelete: {minFor: 8 * time.Second, maxFor: 8 * time.Second, nodes: 1, resource: "net", etcd: true, kube: true},
	MTUChange:   {minFor: 5 * time.Second, maxFor: 15 * time.Second, nodes: 1, resource: "net", etcd: true, kube: true},
	// The API server's faults claim the etcd too, which it needs to start again.
	APIServerKill:    {minFor: 2 * time.Second, maxFor: 20 * time.Second, global: "apiserver", allMembers: true, kube: true},
	APIServerFreeze:  {minFor: 3 * time.Second, maxFor: 20 * time.Second, global: "apiserver", allMembers: true, kube: true},
	NodeChurn:        {minFor: 3 * time.Second, maxFor: 15 * time.Second, global: "churn", kube: true},
	HostileNodes:     {minFor: 3 * time.Second, maxFor: 15 * time.Second, global: "hostile", kube: true},
	AnnotationTamper: {minFor: 3 * time.Second, maxFor: 12 * time.Second, nodes: 2, resource: "annotations", kube: true},
}

// KeepsTraffic reports whether the nodes a fault of kind k touches must lose no packet while
// it lasts.
func (k Kind) KeepsTraffic() bool { return kindSpecs[k].keepsTraffic }

// AllKinds lists every kind of fault, in a fixed order.
func AllKinds() []Kind {
	kinds := make([]Kind, 0, len(kindSpecs))
	for k := range kindSpecs {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// Kinds lists the kinds of fault that apply to a datastore (Etcd or Kube), in a fixed order;
// nil for another.
func Kinds(datastore string) []Kind {
	var kinds []Kind
	for _, k := range AllKinds() {
		spec := kindSpecs[k]
		if datastore == Etcd && spec.etcd || datastore == Kube && spec.kube {
			kinds = append(kinds, k)
		}
	}
	return kinds
}

// Fault is one fault of a schedule.
type Fault struct {
	ID   int           // from 1, in the order of At across the schedule
	At   time.Duration // from the start of its phase
	For  time.Duration // how long it is in force
	Kind Kind
	// Nodes are the indexes (from 0) of the nodes it touches; Members those of the etcd
	// members it takes down, for the kinds that name them.
	Nodes   []int
	Members []int
	// Seed drives what the fault does at random while it runs (which leases it writes,
	// the MTU it sets), so that it too replays.
	Seed uint64
}

// holds names the resources the fault holds while in force, as Plan claims them on an etcd
// of members members.
func (f Fault) holds(members int) []string {
	spec := kindSpecs[f.Kind]
	var rs []string
	if spec.global != "" {
		rs = append(rs, spec.global)
	}
	for _, n := range f.Nodes {
		rs = append(rs, fmt.Sprintf("%s/%d", spec.resource, n))
	}
	if spec.allMembers {
		for m := range members {
			rs = append(rs, fmt.Sprintf("etcd/%d", m))
		}
	}
	for _, m := range f.Members {
		rs = append(rs, fmt.Sprintf("etcd/%d", m))
	}
	return rs
}

// Touches reports whether the fault touches node i's data path.
func (f Fault) Touches(i int) bool { return slices.Contains(f.Nodes, i) }

func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d +%v for %v: %s", f.ID, f.At.Round(time.Millisecond), f.For.Round(time.Millisecond), f.Kind)
	for _, n := range f.Nodes {
		fmt.Fprintf(&b, " n%d", n+1)
	}
	for _, m := range f.Members {
		fmt.Fprintf(&b, " etcd%d", m+1)
	}
	return b.String()
}

// Phase is a busy spell of faults, after which every fault has ended and the cluster must
// converge (Run checks it).
type Phase struct {
	Length time.Duration
	Faults []Fault // by At
}

// Schedule is what Plan makes: the seed and the phases it drew.
type Schedule struct {
	Seed   uint64
	Phases []Phase
}

// Count is how many faults of each kind the schedule holds.
func (s Schedule) Count() map[Kind]int {
	n := map[Kind]int{}
	for _, p := range s.Phases {
		for _, f := range p.Faults {
			n[f.Kind]++
		}
	}
	return n
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %d phases\n", s.Seed, len(s.Phases))
	for i, p := range s.Phases {
		fmt.Fprintf(&b, "phase %d (%v):\n", i+1, p.Length)
		for _, f := range p.Faults {
			fmt.Fprintf(&b, "  %v\n", f)
		}
	}
	return b.String()
}

// PlanConfig says what Plan may draw from.
type PlanConfig struct {
	Duration time.Duration // the busy time in all, split into phases
	Phase    time.Duration // the length of a phase (the last may be shorter); 0: Duration
	Nodes    int           // how many nodes the cluster has
	Members  int           // how many etcd members
	Kinds    []Kind        // the kinds to draw; nil: Kinds(Etcd)
}

// minGap and maxGap bound the time between the starts of two faults: shorter than most
// faults last, so that they overlap.
const minGap, maxGap = 500 * time.Millisecond, 4 * time.Second

// Plan draws a schedule from the seed: a pure function of the seed and the config. Faults
// overlap, but never on the same resource (a node's weftd, a node's network, a node's
// annotations, an etcd member, the API server, the churn and the hostile writer), never
// with every member of an etcd of three or more down at once: two of three are (a quorum
// lost), by EtcdQuorumLoss or by two faults overlapping; and the API server's faults never
// with an etcd member's, since the API server needs its etcd to start again.
func Plan(seed uint64, cfg PlanConfig) (Schedule, error) {
	if cfg.Duration <= 0 || cfg.Nodes < 1 {
		return Schedule{}, fmt.Errorf("soak plan: duration %v and %d nodes: want both positive", cfg.Duration, cfg.Nodes)
	}
	if cfg.Phase <= 0 || cfg.Phase > cfg.Duration {
		cfg.Phase = cfg.Duration
	}
	kinds := cfg.Kinds
	if kinds == nil {
		kinds = Kinds(Etcd)
	}
	for _, k := range kinds {
		if _, ok := kindSpecs[k]; !ok {
			return Schedule{}, fmt.Errorf("soak plan: unknown fault kind %q", k)
		}
	}
	r := rand.New(rand.NewPCG(seed, 0x736f616b)) // "soak"
	s := Schedule{Seed: seed}
	id := 0
	for left := cfg.Duration; left > 0; left -= cfg.Phase {
		p := Phase{Length: min(cfg.Phase, left)}
		b := &board{}
		for at := between(r, minGap, maxGap); at < p.Length; at += between(r, minGap, maxGap) {
			// A few draws for a kind that fits; none may fit when everything is taken.
			for range 4 {
				f, ok := draw(r, kinds, at, p.Length, cfg, b)
				if ok {
					id++
					f.ID = id
					p.Faults = append(p.Faults, f)
					break
				}
			}
		}
		s.Phases = append(s.Phases, p)
	}
	return s, nil
}

func between(r *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(r.Int64N(int64(hi-lo)))
}

// claim is a resource held over [from, to).
type claim struct {
	name     string
	from, to time.Duration
}

// board is what a phase's faults hold.
type board struct{ claims []claim }

func (b *board) free(name string, from, to time.Duration) bool {
	for _, c := range b.claims {
		if c.name == name && c.from < to && from < c.to {
			return false
		}
	}
	return true
}

// down is how many etcd members the faults take down at most over [from, to).
func (b *board) down(from, to time.Duration) int {
	most := 0
	// The count only rises where a claim starts: look there and at from.
	for _, t := range append([]time.Duration{from}, startsIn(b.claims, from, to)...) {
		n := 0
		for _, c := range b.claims {
			if c.name == "etcd-down" && c.from <= t && t < c.to {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func startsIn(cs []claim, from, to time.Duration) []time.Duration {
	var ts []time.Duration
	for _, c := range cs {
		if c.from >= from && c.from < to {
			ts = append(ts, c.from)
		}
	}
	return ts
}

// draw picks a kind and targets for a fault starting at at, if one fits.
func draw(r *rand.Rand, kinds []Kind, at, length time.Duration, cfg PlanConfig, b *board) (Fault, bool) {
	k := kinds[r.IntN(len(kinds))]
	spec := kindSpecs[k]
	d := between(r, spec.minFor, spec.maxFor)
	if at+d > length {
		return Fault{}, false
	}
	end := at + d
	f := Fault{At: at, For: d, Kind: k, Seed: r.Uint64()}
	var claims []claim
	if spec.global != "" {
		if !b.free(spec.global, at, end) {
			return Fault{}, false
		}
		claims = append(claims, claim{spec.global, at, end})
	}
	if spec.nodes != 0 {
		var free []int
		for i := range cfg.Nodes {
			if b.free(fmt.Sprintf("%s/%d", spec.resource, i), at, end) {
				free = append(free, i)
			}
		}
		want := spec.nodes
		if want < 0 {
			if cfg.Nodes < 2 {
				return Fault{}, false
			}
			want = 2 + r.IntN(cfg.Nodes-1)
		}
		if len(free) < want {
			return Fault{}, false
		}
		r.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
		f.Nodes = slices.Sorted(slices.Values(free[:want]))
		for _, i := range f.Nodes {
			claims = append(claims, claim{fmt.Sprintf("%s/%d", spec.resource, i), at, end})
		}
	}
	if spec.members > 0 {
		// Never all the members of three or more: two of three down is a quorum lost,
		// which etcd comes back from; a sole member may go.
		capacity := cfg.Members - 1
		if cfg.Members < 3 {
			capacity = cfg.Members
		}
		if b.down(at, end)+spec.members > capacity {
			return Fault{}, false
		}
		var free []int
		for i := range cfg.Members {
			if b.free(fmt.Sprintf("etcd/%d", i), at, end) {
				free = append(free, i)
			}
		}
		if spec.allMembers {
			if len(free) < cfg.Members {
				return Fault{}, false
			}
			for i := range cfg.Members {
				claims = append(claims, claim{fmt.Sprintf("etcd/%d", i), at, end})
			}
		} else {
			if len(free) < spec.members {
				return Fault{}, false
			}
			r.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
			f.Members = slices.Sorted(slices.Values(free[:spec.members]))
			for _, i := range f.Members {
				claims = append(claims, claim{fmt.Sprintf("etcd/%d", i), at, end})
			}
		}
		for range spec.members {
			claims = append(claims, claim{"etcd-down", at, end})
		}
	} else if spec.allMembers {
		// It takes no member down but needs them all up.
		for i := range cfg.Members {
			if !b.free(fmt.Sprintf("etcd/%d", i), at, end) {
				return Fault{}, false
			}
			claims = append(claims, claim{fmt.Sprintf("etcd/%d", i), at, end})
		}
	}
	b.claims = append(b.claims, claims...)
	return f, true
}
