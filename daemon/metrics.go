package daemon

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/internal/buildinfo"
	"github.com/weftnet/weft/probe"
	"github.com/weftnet/weft/subnet"
)

// metrics are what weftd exports on /metrics. Each is documented in the README.
type metrics struct {
	reg *prometheus.Registry

	leaseInfo        *prometheus.GaugeVec
	leaseExpiry      prometheus.Gauge
	acquisitions     *prometheus.CounterVec
	renewals         *prometheus.CounterVec
	peers            *countCollector
	pool             *poolCollector
	wireguard        *wgCollector
	probes           *prometheus.CounterVec
	probeRTT         prometheus.Histogram
	unreachable      prometheus.Gauge
	transportBroken  prometheus.Gauge
	mtuShort         prometheus.Gauge
	offload          *prometheus.GaugeVec
	offloadChanges   prometheus.Counter
	ready            func() bool // whether /readyz passes; set before the metrics are served
	eventsReceived   *prometheus.CounterVec
	eventsApplied    prometheus.Counter
	watchRestarts    prometheus.Counter
	watchRelists     prometheus.Counter
	convergeDuration prometheus.Histogram
	changes          *prometheus.CounterVec
	driftRestored    *prometheus.CounterVec
	errors           *prometheus.CounterVec
	skipped          *prometheus.CounterVec
	contested        prometheus.Gauge
	programDelay     prometheus.Histogram
	datastoreLatency *prometheus.HistogramVec
	nodeEvents       *prometheus.CounterVec
	policyPods       *prometheus.GaugeVec
	policyRefused    prometheus.Gauge
	policyWrites     *prometheus.CounterVec
	policyRules      prometheus.Gauge
	policyDrift      prometheus.Counter
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		leaseInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_lease_info", Help: "The node's own lease: always 1, the lease in the labels.",
		}, []string{"subnet", "public_ip", "backend"}),
		leaseExpiry: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_lease_expiry_timestamp_seconds", Help: "When the own lease expires unless renewed (Unix time; 0: never).",
		}),
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_lease_acquisitions_total", Help: "Lease acquisitions by result (success, error).",
		}, []string{"result"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_lease_renewals_total", Help: "Lease renewals by result (success, changed: the subnet changed, error).",
		}, []string{"result"}),
		wireguard: &wgCollector{desc: prometheus.NewDesc("weft_wireguard_peers",
			"Peers of each WireGuard device by their latest handshake: recent (under 180 s ago, while a session can still carry data), stale (older: idle, or the peer unreachable), never.",
			[]string{"device", "handshake"}, nil), now: time.Now},
		peers: &countCollector{desc: prometheus.NewDesc("weft_peers",
			"Peer leases known, by backend type and state (programmed, skipped).", []string{"backend", "state"}, nil)},
		pool: &poolCollector{
			total: prometheus.NewDesc("weft_subnet_pool_subnets",
				"Subnets the network config allows, by family (etcd mode: weft hands them out).", []string{"family"}, nil),
			free: prometheus.NewDesc("weft_subnet_pool_free_subnets",
				"Of those, subnets no lease holds, by family: what nodes joining can still get.", []string{"family"}, nil),
		},
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_probes_total", Help: "Probes of peers through the data plane, by kind (icmp; tcp and udp to a closed port through the tunnel; mtu, an echo of the pods' MTU that must arrive whole) and outcome (ok, lost, error).",
		}, []string{"kind", "outcome"}),
		probeRTT: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weft_probe_rtt_seconds", Help: "Round trips of the answered ICMP probes through the data plane.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		unreachable: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_peers_unreachable", Help: "Peers (each IP family's half apart) whose last probes through the data plane all went unanswered.",
		}),
		transportBroken: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_peers_transport_broken", Help: "Overlay peers that answer ICMP through the tunnel but neither TCP nor UDP, check after check: the signature of corrupted checksums.",
		}),
		mtuShort: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_peers_path_mtu_short", Help: "Overlay peers whose path carries less than the pods' MTU: they answer small echoes through the tunnel, not echoes of that size, check after check.",
		}),
		offload: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "weft_vxlan_tx_checksum_offload", Help: "Transmit checksum offload of the VXLAN device: 1 on, 0 off.",
		}, []string{"device"}),
		offloadChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_vxlan_tx_checksum_offload_changes_total", Help: "Times weftd turned the VXLAN device's transmit checksum offload off on its own (--vxlan-tx-checksum-offload=auto).",
		}),
		eventsReceived: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_lease_events_received_total", Help: "Lease events received from the datastore, by type (added, removed).",
		}, []string{"type"}),
		eventsApplied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_lease_events_applied_total", Help: "Lease events whose result has been programmed into the data plane.",
		}),
		watchRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_watch_restarts_total", Help: "Times the datastore watch broke and was resumed.",
		}),
		watchRelists: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "weft_watch_relists_total", Help: "Full re-lists of the leases after the watch lost history (e.g. an etcd compaction).",
		}),
		convergeDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weft_convergence_duration_seconds", Help: "Time to converge the data plane to the leases.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_dataplane_changes_total", Help: "Data plane entries written, by kind (Linux: route, nexthop, neighbor, fdb, address, masquerade, forward, wireguard_peer; Windows: hns_network, hns_policy, hns_endpoint, hns_namespace, forwarding, route).",
		}, []string{"kind"}),
		driftRestored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_drift_restored_total", Help: "Entries written back after someone else changed or deleted them, by kind.",
		}, []string{"kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_errors_total", Help: "Errors by operation (get_config, acquire, renew, converge, write_subnet_env).",
		}, []string{"operation"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_peer_leases_skipped_total", Help: "Peer leases skipped as unusable, by reason; each lease counts once per reason.",
		}, []string{"reason"}),
		contested: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "weft_own_lease_contested", Help: "Peer leases older than the node's own that claim its subnet, public IP or VTEP MAC: the node is the newcomer.",
		}),
		programDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "weft_peer_programming_delay_seconds", Help: "Delay from a peer's lease change seen in the datastore to the data plane programmed.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		datastoreLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "weft_datastore_request_duration_seconds", Help: "Latency of datastore requests by operation (get_config, acquire, renew).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"operation"}),
		nodeEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "weft_node_events_total", Help: "Kubernetes Events posted on the node's Node object, by reason and result (success, error).",
		}, []string{"reason", "result"}),
	}
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weft_build_info", Help: "Build of this weftd: always 1, the version in the labels.",
	}, []string{"version", "goversion"})
	build.WithLabelValues(buildinfo.Version(), runtime.Version()).Set(1)
	ready := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "weft_ready", Help: "1 while /readyz passes (the body of /readyz says why not), else 0.",
	}, func() float64 {
		if m.ready != nil && m.ready() {
			return 1
		}
		return 0
	})
	m.policyPods = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "weft_network_policy_pods", Help: "The node's pods as NetworkPolicy sees them (--network-policy), by isolation (none, ingress, egress, both).",
	}, []string{"isolated"})
	m.policyRefused = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "weft_network_policy_refused", Help: "NetworkPolicies weft cannot enforce as written: the pods they select are denied in their directions.",
	})
	m.policyWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "weft_network_policy_writes_total", Help: "Writes of the policy table by result (success, error): each a change of pods, namespaces or policies, or drift repaired.",
	}, []string{"result"})
	m.policyRules = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "weft_network_policy_rules", Help: "Allow rules of the node's isolated pods (each a policy rule's peers and ports for one pod and direction).",
	})
	m.policyDrift = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "weft_network_policy_drift_repaired_total", Help: "Resyncs of the policy table (every 10 s) that found the data plane changed by someone else and wrote it back.",
	})
	m.reg.MustRegister(m.policyPods, m.policyRefused, m.policyWrites, m.policyRules, m.policyDrift)
	m.reg.MustRegister(m.leaseInfo, m.leaseExpiry, m.acquisitions, m.renewals, m.peers, m.pool, m.wireguard, m.probes, m.probeRTT, m.unreachable,
		m.transportBroken, m.mtuShort, m.offload, m.offloadChanges, m.eventsReceived,
		m.eventsApplied, m.watchRestarts, m.watchRelists, m.convergeDuration, m.changes, m.driftRestored,
		m.errors, m.skipped, m.contested, m.programDelay, m.datastoreLatency, m.nodeEvents, build, ready,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Start every labelled series at zero so that rate() and absent() work from the first scrape.
	for _, r := range []string{"success", "error"} {
		m.acquisitions.WithLabelValues(r)
	}
	for _, r := range []string{"success", "changed", "error"} {
		m.renewals.WithLabelValues(r)
	}
	for _, t := range []string{"added", "removed"} {
		m.eventsReceived.WithLabelValues(t)
	}
	for _, op := range []string{"get_config", "acquire", "renew", "converge", "write_subnet_env"} {
		m.errors.WithLabelValues(op)
	}
	for _, op := range []string{"get_config", "acquire", "renew"} {
		m.datastoreLatency.WithLabelValues(op)
	}
	for _, code := range backend.SkipCodes() {
		m.skipped.WithLabelValues(code)
	}
	for _, r := range probe.Results() {
		m.probes.WithLabelValues(r[0], r[1])
	}
	return m
}

// countCollector is a gauge of two labels counted when scraped, from a model the daemon
// keeps anyway, rather than updated on every event.
type countCollector struct {
	desc  *prometheus.Desc
	count func() map[[2]string]int // set before the metrics are served
}

func (c *countCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *countCollector) Collect(ch chan<- prometheus.Metric) {
	if c.count == nil {
		return
	}
	for labels, n := range c.count() {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), labels[0], labels[1])
	}
}

// poolCollector reports the subnet pool when scraped, from what the datastore's watch keeps
// (subnet.PoolReporter); nothing where weft does not hand out the subnets (Kubernetes).
type poolCollector struct {
	total, free *prometheus.Desc
	pool        func() []subnet.PoolUsage // set before the metrics are served, if at all
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.total; ch <- c.free }

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	if c.pool == nil {
		return
	}
	for _, u := range c.pool() {
		fam := "IPv4"
		if u.IPv6 {
			fam = "IPv6"
		}
		ch <- prometheus.MustNewConstMetric(c.total, prometheus.GaugeValue, float64(u.Total), fam)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(u.Total-min(u.Leased, u.Total)), fam)
	}
}

// wgCollector counts the WireGuard devices' peers by handshake when scraped, from the devices
// themselves (backend.WireGuardRunner): nothing on nodes of other backends.
type wgCollector struct {
	desc    *prometheus.Desc
	now     func() time.Time
	devices atomic.Pointer[[]wgDevice] // set once the backends are built
}

// wgDevice is a WireGuard device and the plane that runs it.
type wgDevice struct {
	name   string
	runner backend.WireGuardRunner
}

// wgSessionLife is WireGuard's Reject-After-Time: a session older than this carries no data,
// so a peer whose latest handshake is older has no working session until it shakes hands again.
const wgSessionLife = 180 * time.Second

func (c *wgCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *wgCollector) Collect(ch chan<- prometheus.Metric) {
	devs := c.devices.Load()
	if devs == nil {
		return
	}
	now := c.now()
	for _, d := range *devs {
		hs, err := d.runner.PeerHandshakes(d.name)
		if err != nil {
			continue // the device is being re-made: its drift is reported and repaired elsewhere
		}
		var recent, stale, never int
		for _, t := range hs {
			switch {
			case t.IsZero():
				never++
			case now.Sub(t) < wgSessionLife:
				recent++
			default:
				stale++
			}
		}
		for label, n := range map[string]int{"recent": recent, "stale": stale, "never": never} {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), d.name, label)
		}
	}
}
