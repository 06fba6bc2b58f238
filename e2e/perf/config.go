package perf

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Daemon names.
const (
	Flanneld = "flanneld"
	Weftd    = "weftd"
)

// Config is what a benchmark run measures and with which binaries.
type Config struct {
	// Weftd and Flanneld are the daemons' binaries. An empty one is not measured.
	Weftd, Flanneld string

	// Sizes are the numbers of peer leases in etcd for the cold-start figures.
	Sizes []int
	// EventSizes are the numbers of peers at which the event latency is measured.
	EventSizes []int
	// Events lease puts are made, EventInterval apart; an event whose route is not seen
	// within EventTimeout of its put counts as a timeout.
	Events        int
	EventInterval time.Duration
	EventTimeout  time.Duration
	// Bulk leases are put as fast as possible into a cluster of BulkBase peers; 0 skips it.
	Bulk, BulkBase int
	// KubeSizes are the numbers of Node objects for the Kubernetes-mode figures; empty
	// skips them (and the API server).
	KubeSizes []int
	// ThroughputBytes is what each TCP stream from pod to pod carries for the throughput
	// figures; 0 skips them. They need CNIBin.
	ThroughputBytes int64
	// CNIBin is the directory of the bridge and host-local CNI plugins that make the
	// throughput figures' pods.
	CNIBin string
	// Reps is how often each cold-start and throughput figure is measured; the report has
	// the median.
	Reps int
	// Settle is how long a daemon runs after its last route before its RSS is read.
	Settle time.Duration
	// StartTimeout bounds a cold start (until every peer route is seen).
	StartTimeout time.Duration
	// Dir holds the clusters' files (daemon logs); default a new directory under $TMPDIR,
	// removed after a run without errors.
	Dir string
}

// DefaultConfig is the full run of `make bench`.
func DefaultConfig() Config {
	return Config{
		Sizes:         []int{1000, 5000, 20000},
		EventSizes:    []int{1000, 20000},
		Events:        200,
		EventInterval: 50 * time.Millisecond,
		EventTimeout:  10 * time.Second,
		Bulk:          5000,
		BulkBase:      1000,
		KubeSizes:     []int{1000, 5000},
		// About 2 s a stream with the offload on here, 11 s with it off.
		ThroughputBytes: 2 << 30,
		Reps:            3,
		Settle:          5 * time.Second,
		StartTimeout:    2 * time.Minute,
	}
}

// QuickConfig is a short run: 1,000 peers, one repetition, 50 events, 1 GiB streams.
func QuickConfig() Config {
	c := DefaultConfig()
	c.Sizes, c.EventSizes, c.KubeSizes = []int{1000}, []int{1000}, []int{1000}
	c.Events, c.Reps = 50, 1
	c.ThroughputBytes = 1 << 30
	return c
}

// Daemons are the names of the daemons measured, flanneld first.
func (c Config) Daemons() []string {
	var d []string
	if c.Flanneld != "" {
		d = append(d, Flanneld)
	}
	if c.Weftd != "" {
		d = append(d, Weftd)
	}
	return d
}

// Validate reports a configuration that cannot run.
func (c Config) Validate() error {
	if c.Weftd == "" && c.Flanneld == "" {
		return errors.New("perf: no daemon to measure: neither weftd nor flanneld is set")
	}
	if c.Reps < 1 {
		return fmt.Errorf("perf: repetitions %d: want at least 1", c.Reps)
	}
	bulkBase := []int{}
	if c.Bulk > 0 {
		bulkBase = append(bulkBase, c.BulkBase)
	}
	for _, sizes := range [][]int{c.Sizes, c.EventSizes, c.KubeSizes, bulkBase} {
		for _, n := range sizes {
			if n < 1 {
				return fmt.Errorf("perf: %d peers: want at least 1", n)
			}
		}
	}
	most := slices.Max(append(append([]int{0}, c.Sizes...), c.KubeSizes...))
	if c.Bulk > 0 {
		most = max(most, c.BulkBase+c.Bulk)
	}
	for _, n := range c.EventSizes {
		most = max(most, n+c.Events)
	}
	if most > MaxPeers {
		return fmt.Errorf("perf: up to %d peers at once: want at most %d", most, MaxPeers)
	}
	if len(c.EventSizes) > 0 && (c.Events < 1 || c.EventInterval <= 0 || c.EventTimeout <= 0) {
		return fmt.Errorf("perf: events %d every %v, timeout %v: want positive values", c.Events, c.EventInterval, c.EventTimeout)
	}
	if c.ThroughputBytes < 0 {
		return fmt.Errorf("perf: throughput streams of %d bytes: want 0 (none) or more", c.ThroughputBytes)
	}
	if c.ThroughputBytes > 0 && c.CNIBin == "" {
		return errors.New("perf: the throughput figures need the CNI plugins' directory (CNIBin)")
	}
	if c.Bulk < 0 || c.Settle < 0 || c.StartTimeout <= 0 {
		return fmt.Errorf("perf: bulk %d, settle %v, start timeout %v: want bulk and settle >= 0, a positive timeout",
			c.Bulk, c.Settle, c.StartTimeout)
	}
	return nil
}
