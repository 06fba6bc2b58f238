package perf

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Groups of figures, in the order of the table.
const (
	groupCold = iota
	groupRSS
	groupEvent
	groupBulk
	groupKube
	groupThroughput
)

const (
	// parallelStreams is how many streams the many-stream figures run at once.
	parallelStreams = 8
	// roundTrips is how many request/response exchanges a round-trip figure averages.
	roundTrips = 2000
)

// figure names a row of the table and places it.
type figure struct {
	group, peers, sub int
	name              string
	kind              Kind
	// shared: one measurement, not a daemon's (the kernel's floor), given to every daemon's
	// column; it has no ratio.
	shared bool
}

// figures collects samples per figure and daemon.
type figures struct {
	order   []figure
	samples map[string]map[string][]Value // figure name -> daemon -> samples
	notes   map[string]string
}

func newFigures() *figures {
	return &figures{samples: make(map[string]map[string][]Value), notes: make(map[string]string)}
}

// add records a sample of a figure for a daemon.
func (f *figures) add(fig figure, daemon string, v Value) {
	m, ok := f.samples[fig.name]
	if !ok {
		m = make(map[string][]Value)
		f.samples[fig.name] = m
		f.order = append(f.order, fig)
	}
	m[daemon] = append(m[daemon], v)
}

// median is the median of a daemon's samples of a figure (missing when it has none).
func (f *figures) median(fig figure, daemon string) Value { return median(f.samples[fig.name][daemon]) }

// has reports whether a figure has a sample for a daemon.
func (f *figures) has(fig figure, daemon string) bool {
	_, ok := f.samples[fig.name][daemon]
	return ok
}

// note adds a remark to a figure's row.
func (f *figures) note(fig figure, daemon, text string) {
	if prev := f.notes[fig.name]; prev != "" {
		text = prev + "; " + daemon + ": " + text
	} else {
		text = daemon + ": " + text
	}
	f.notes[fig.name] = text
}

// into adds the rows to a report, grouped and by number of peers.
func (f *figures) into(r *Report) {
	order := slices.Clone(f.order)
	slices.SortStableFunc(order, func(a, b figure) int {
		return cmp.Or(cmp.Compare(a.group, b.group), cmp.Compare(a.peers, b.peers), cmp.Compare(a.sub, b.sub))
	})
	for _, fig := range order {
		r.add(fig.name, fig.kind, f.samples[fig.name], f.notes[fig.name])
		r.Rows[len(r.Rows)-1].Shared = fig.shared
	}
}

// count writes a number of peers as the table does: 1k, 20k, 50.
func count(n int) string {
	if n >= 1000 && n%1000 == 0 {
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// The figures of the table.
func figEnv(n int) figure {
	return figure{groupCold, n, 0, "cold start, " + count(n) + " peers: subnet.env", Duration, false}
}
func figFirst(n int) figure {
	return figure{groupCold, n, 1, "cold start, " + count(n) + " peers: first route", Duration, false}
}
func figAll(n int) figure {
	return figure{groupCold, n, 2, "cold start, " + count(n) + " peers: all routes", Duration, false}
}
func figFloor(n int) figure {
	return figure{groupCold, n, 3, "cold start, " + count(n) + " peers: the kernel's floor (the same entries, a minimal program's netlink writes)", Duration, true}
}
func figFloorRatio(n int) figure {
	return figure{groupCold, n, 4, "cold start, " + count(n) + " peers: all routes / the kernel's floor", Factor, false}
}
func figListFloor(n int) figure {
	return figure{groupCold, n, 5, "cold start, " + count(n) + " peers: etcd's listing of the leases, to a client that decodes none (the datastore's floor)", Duration, true}
}
func figFloorsRatio(n int) figure {
	return figure{groupCold, n, 6, "cold start, " + count(n) + " peers: all routes / (the datastore's floor + the kernel's floor)", Factor, false}
}
func figRSS(n int) figure {
	return figure{groupRSS, n, 0, "RSS after settling, " + count(n) + " peers", Memory, false}
}
func figPeak(n int) figure {
	return figure{groupRSS, n, 1, "peak RSS (VmHWM), " + count(n) + " peers", Memory, false}
}
func figPeakRatio(n int) figure {
	return figure{groupRSS, n, 2, "peak RSS / RSS after settling, " + count(n) + " peers", Factor, false}
}
func figP50(n int) figure {
	return figure{groupEvent, n, 0, "lease put -> route, " + count(n) + " peers: p50", Duration, false}
}
func figP99(n int) figure {
	return figure{groupEvent, n, 1, "lease put -> route, " + count(n) + " peers: p99", Duration, false}
}
func figFloor50(n int) figure {
	return figure{groupEvent, n, 2, "lease put -> etcd's watch event in the harness (the floor), " + count(n) + " peers: p50", Duration, false}
}
func figFloor99(n int) figure {
	return figure{groupEvent, n, 3, "lease put -> etcd's watch event in the harness (the floor), " + count(n) + " peers: p99", Duration, false}
}
func figBulk(base, n int) figure {
	return figure{groupBulk, base, 0, "bulk join of " + count(n) + " at " + count(base) + " peers: all routes", Duration, false}
}
func figKubeAll(n int) figure {
	return figure{groupKube, n, 0, "Kubernetes mode, " + count(n) + " Nodes: all routes", Duration, false}
}
func figKubeRSS(n int) figure {
	return figure{groupKube, n, 1, "Kubernetes mode, " + count(n) + " Nodes: RSS", Memory, false}
}
func figKubePeak(n int) figure {
	return figure{groupKube, n, 2, "Kubernetes mode, " + count(n) + " Nodes: peak RSS (VmHWM)", Memory, false}
}
func figKubeStream(n int) figure {
	return figure{groupKube, n, 4, "Kubernetes mode, " + count(n) + " Nodes: the API server's streamed list of them, to a client that decodes no Node (the datastore's floor)", Duration, true}
}
func figKubeFloorsRatio(n int) figure {
	return figure{groupKube, n, 5, "Kubernetes mode, " + count(n) + " Nodes: all routes / (the datastore's floor + the kernel's floor)", Factor, false}
}
func figKubeStorm(n, k int) figure {
	return figure{groupKube, n, 3, "Kubernetes mode, " + count(n) + " Nodes: CPU per Node update (" + count(k) + " label changes)", Duration, false}
}

// The throughput figures, for streams of n bytes.
func figTputOn(n int64) figure {
	return figure{groupThroughput, 0, 0, "pod-to-pod TCP over VXLAN, " + mebibytes(n) + " streams: offload on", Rate, false}
}
func figTputOff(n int64) figure {
	return figure{groupThroughput, 0, 1, "pod-to-pod TCP over VXLAN, " + mebibytes(n) + " streams: offload off", Rate, false}
}
func figTputFactor(n int64) figure {
	return figure{groupThroughput, 0, 2, "pod-to-pod TCP over VXLAN, " + mebibytes(n) + " streams: offload on / off", Factor, false}
}

func figTputVXLANParallel(n int64) figure {
	return figure{groupThroughput, 0, 3, fmt.Sprintf("pod-to-pod TCP over VXLAN, %d streams at once, %s in all", parallelStreams, mebibytes(n)), Rate, false}
}
func figRRVXLAN() figure {
	return figure{groupThroughput, 0, 4, "pod-to-pod TCP over VXLAN: request/response round trip (1 byte each way)", Duration, false}
}
func figTputHostGW(n int64) figure {
	return figure{groupThroughput, 0, 5, "pod-to-pod TCP over host-gw (no encapsulation), " + mebibytes(n) + " streams", Rate, false}
}
func figTputHostGWParallel(n int64) figure {
	return figure{groupThroughput, 0, 6, fmt.Sprintf("pod-to-pod TCP over host-gw, %d streams at once, %s in all", parallelStreams, mebibytes(n)), Rate, false}
}
func figRRHostGW() figure {
	return figure{groupThroughput, 0, 7, "pod-to-pod TCP over host-gw: request/response round trip (1 byte each way)", Duration, false}
}
func figTputOverHostGW(n int64) figure {
	return figure{groupThroughput, 0, 8, "pod-to-pod TCP, " + mebibytes(n) + " streams: VXLAN (offload on) / host-gw", Factor, false}
}
func figTputSameNode(n int64) figure {
	return figure{groupThroughput, 0, 9, "pod-to-pod TCP on one node (the bridge alone), " + mebibytes(n) + " streams", Rate, true}
}
func figTputWireGuard(n int64) figure {
	return figure{groupThroughput, 0, 10, "pod-to-pod TCP over WireGuard, " + mebibytes(n) + " streams", Rate, false}
}

// mebibytes writes a size as the table does: 64 MiB, 4 GiB, 1500 bytes.
func mebibytes(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + " GiB"
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}
