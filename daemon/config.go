package daemon

import (
	"flag"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"time"

	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
)

// Config is how weftd runs. Flags carry flanneld's names where flanneld has them.
type Config struct {
	KubeConfig // --kube-subnet-mgr and the flags of Kubernetes mode (kube.go)

	EtcdEndpoints []string
	EtcdPrefix    string
	EtcdCAFile    string
	EtcdCertFile  string
	EtcdKeyFile   string
	EtcdUsername  string
	EtcdPassword  string

	Ifaces      []string // names or addresses, tried in order
	IfaceRegexs []string
	// IfaceCanReach is an address: without a match in Ifaces or IfaceRegexs, the interface is
	// the one the route to it leaves by.
	IfaceCanReach string
	PublicIP      string
	PublicIPv6    string

	SubnetFile  string
	RenewMargin time.Duration
	IPMasq      bool
	// IPMasqNotFullyRandom masquerades without fully-random (--ip-masq-fully-random-disable).
	IPMasqNotFullyRandom bool
	// ForwardRules accepts the pod network's forwarded traffic in weft's nftables table
	// (--iptables-forward-rules; Linux).
	ForwardRules bool
	// BlackholeRoute routes the node's own subnet to a blackhole (--ip-blackhole-route; Linux).
	BlackholeRoute bool
	HealthzIP      string
	HealthzPort    int
	// DebugPprof adds Go's profiles (net/http/pprof) under /debug/pprof/ to the health
	// endpoints, for finding where a node's memory and CPU go (--debug-pprof; off: they
	// expose the daemon's internals to whoever reaches the port).
	DebugPprof     bool
	ResyncInterval time.Duration
	// DatastoreTimeout is how long the datastore may be unreachable before /readyz fails:
	// long enough for an etcd leader election, short enough that a node cut off from its
	// datastore says so within seconds (kubelet's readiness probe adds its own
	// failureThreshold).
	DatastoreTimeout time.Duration
	// WireGuardKeyFile holds the node's WireGuard private key (wgkey.Path: $WIREGUARD_KEY_FILE,
	// else flanneld's /run/flannel/wgkey); made when missing. Read only for the wireguard
	// backend.
	WireGuardKeyFile string
	// NotifySocket is systemd's $NOTIFY_SOCKET: told READY=1 after the first convergence.
	NotifySocket string
	// ProbeInterval is how often a round of overlay probes goes out (0: no probes);
	// ProbePeers how many peers a round probes at most, per family.
	ProbeInterval time.Duration
	ProbePeers    int
	// TxChecksumOffload is what weftd does with the transmit checksum offload of the VXLAN
	// device: OffloadAuto, OffloadOn or OffloadOff.
	TxChecksumOffload string
}

// The values of --vxlan-tx-checksum-offload.
const (
	// OffloadAuto leaves the offload as it finds it, and turns it off when the overlay probes
	// show it corrupting checksums: a peer answers ICMP through the tunnel but neither TCP
	// nor UDP.
	OffloadAuto = "auto"
	// OffloadOn turns it on at start (an earlier run may have turned it off), and on every
	// device weftd makes, and never off: the signature is only reported.
	OffloadOn = "on"
	// OffloadOff turns it off at start, and on every device weftd makes.
	OffloadOff = "off"
)

// DefaultConfig is flanneld's defaults, except that health endpoints listen on loopback.
func DefaultConfig() Config {
	return Config{
		KubeConfig:       DefaultKubeConfig(),
		EtcdEndpoints:    []string{"http://127.0.0.1:4001", "http://127.0.0.1:2379"},
		EtcdPrefix:       etcd.DefaultPrefix,
		SubnetFile:       subnet.DefaultEnvFile,
		RenewMargin:      60 * time.Minute,
		HealthzIP:        "127.0.0.1",
		HealthzPort:      8285,
		ResyncInterval:   30 * time.Second,
		DatastoreTimeout: 5 * time.Second,
		ProbeInterval:    time.Second,
		ProbePeers:       4,

		TxChecksumOffload: OffloadAuto,
		ForwardRules:      true,
	}
}

// AddFlags registers the flags on fs, writing into c.
func (c *Config) AddFlags(fs *flag.FlagSet) {
	fs.Var(listFlag{&c.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd endpoints")
	fs.StringVar(&c.EtcdPrefix, "etcd-prefix", c.EtcdPrefix, "etcd prefix of the network config and leases")
	fs.StringVar(&c.EtcdCAFile, "etcd-cafile", c.EtcdCAFile, "CA bundle that signed etcd's certificate")
	fs.StringVar(&c.EtcdCertFile, "etcd-certfile", c.EtcdCertFile, "client certificate for etcd")
	fs.StringVar(&c.EtcdKeyFile, "etcd-keyfile", c.EtcdKeyFile, "key of the client certificate for etcd")
	fs.StringVar(&c.EtcdUsername, "etcd-username", c.EtcdUsername, "etcd user name")
	fs.StringVar(&c.EtcdPassword, "etcd-password", c.EtcdPassword, "etcd password")
	fs.Var(appendFlag{&c.Ifaces}, "iface", "interface (name or address) for inter-node traffic; repeat or comma-separate to try several in order")
	fs.Var(appendFlag{&c.IfaceRegexs}, "iface-regex", "regular expression matching the interface name or address to use; repeatable")
	fs.StringVar(&c.IfaceCanReach, "iface-can-reach", c.IfaceCanReach, "IP address (either family): when no --iface or --iface-regex matches, use the interface of the route to it (ip route get <address>)")
	fs.StringVar(&c.PublicIP, "public-ip", c.PublicIP, "IP other nodes reach this one on (default: the interface's address)")
	fs.StringVar(&c.PublicIPv6, "public-ipv6", c.PublicIPv6, "IPv6 address other nodes reach this one on, when the network config enables IPv6 (default: the interface's global IPv6 address)")
	fs.StringVar(&c.SubnetFile, "subnet-file", c.SubnetFile, "where to write subnet.env for the CNI plugin")
	fs.Var(minutesFlag{&c.RenewMargin}, "subnet-lease-renew-margin", "renew the lease this many minutes before it expires")
	fs.BoolVar(&c.IPMasq, "ip-masq", c.IPMasq, "masquerade traffic from pods to outside the cluster network")
	fs.BoolVar(&c.IPMasqNotFullyRandom, "ip-masq-fully-random-disable", c.IPMasqNotFullyRandom, "masquerade without fully-random (source ports kept where they can be)")
	fs.BoolVar(&c.ForwardRules, "iptables-forward-rules", c.ForwardRules, "accept forwarded traffic from and to the pod network in weft's nftables table (false: leave forwarding to the host's rules)")
	fs.BoolVar(&c.BlackholeRoute, "ip-blackhole-route", c.BlackholeRoute, "route the node's own subnet to a blackhole, kept like the routes to peers (for Canal: pods not on a bridge)")
	fs.StringVar(&c.HealthzIP, "healthz-ip", c.HealthzIP, "address of /healthz, /readyz, /status and /metrics (loopback by default: set the node's address for Prometheus)")
	fs.IntVar(&c.HealthzPort, "healthz-port", c.HealthzPort, "port of /healthz, /readyz, /status and /metrics (0: off)")
	fs.BoolVar(&c.DebugPprof, "debug-pprof", c.DebugPprof, "serve Go's heap, CPU and goroutine profiles under /debug/pprof/ on the health endpoints' port (for debugging; keep --healthz-ip on loopback)")
	fs.DurationVar(&c.ResyncInterval, "resync-interval", c.ResyncInterval, "how often the data plane is checked against the leases even without events")
	fs.DurationVar(&c.DatastoreTimeout, "datastore-timeout", c.DatastoreTimeout, "how long the datastore may be unreachable before /readyz fails")
	fs.DurationVar(&c.ProbeInterval, "probe-interval", c.ProbeInterval, "how often a round of probes checks peers through the data plane (0: no probes)")
	fs.IntVar(&c.ProbePeers, "probe-peers", c.ProbePeers, "peers a round of probes checks at most, per IP family: every peer is probed within (peers / (this / 2)) rounds")
	fs.StringVar(&c.TxChecksumOffload, "vxlan-tx-checksum-offload", c.TxChecksumOffload, "transmit checksum offload of the VXLAN device: auto (turned off when the probes find TCP and UDP dropped while ICMP passes through the tunnel), on (turned on at start, never off), off (turned off at start)")
	c.KubeConfig.AddFlags(fs)
}

// Validate checks what can be checked before talking to anyone; errors name the flag.
func (c *Config) Validate() error {
	if err := c.KubeConfig.Validate(); err != nil {
		return err
	}
	if !c.KubeSubnetMgr && len(c.EtcdEndpoints) == 0 {
		return fmt.Errorf("--etcd-endpoints: none given")
	}
	for _, re := range c.IfaceRegexs {
		if _, err := regexp.Compile(re); err != nil {
			return fmt.Errorf("--iface-regex=%q: %w", re, err)
		}
	}
	if c.IfaceCanReach != "" {
		if _, err := netip.ParseAddr(c.IfaceCanReach); err != nil {
			return fmt.Errorf("--iface-can-reach=%q: not an IP address", c.IfaceCanReach)
		}
	}
	if c.PublicIP != "" {
		if a, err := netip.ParseAddr(c.PublicIP); err != nil || !a.Is4() {
			return fmt.Errorf("--public-ip=%q: not an IPv4 address", c.PublicIP)
		}
	}
	if c.PublicIPv6 != "" {
		if a, err := netip.ParseAddr(c.PublicIPv6); err != nil || !a.Is6() || a.Is4In6() || a.Zone() != "" {
			return fmt.Errorf("--public-ipv6=%q: not an IPv6 address", c.PublicIPv6)
		}
	}
	if c.SubnetFile == "" {
		return fmt.Errorf("--subnet-file: empty")
	}
	if c.RenewMargin <= 0 {
		return fmt.Errorf("--subnet-lease-renew-margin=%v: must be positive", c.RenewMargin)
	}
	if c.HealthzPort < 0 || c.HealthzPort > 65535 {
		return fmt.Errorf("--healthz-port=%d: not a port", c.HealthzPort)
	}
	if c.DebugPprof && c.HealthzPort == 0 {
		return fmt.Errorf("--debug-pprof: the profiles are served on the health endpoints, which --healthz-port=0 turns off")
	}
	if c.HealthzPort != 0 {
		if _, err := netip.ParseAddr(c.HealthzIP); err != nil {
			return fmt.Errorf("--healthz-ip=%q: not an IP address", c.HealthzIP)
		}
	}
	if c.DatastoreTimeout <= 0 {
		return fmt.Errorf("--datastore-timeout=%v: must be positive", c.DatastoreTimeout)
	}
	if c.ResyncInterval < time.Second {
		return fmt.Errorf("--resync-interval=%v: must be at least 1s", c.ResyncInterval)
	}
	if c.ProbeInterval != 0 && c.ProbeInterval < 100*time.Millisecond {
		return fmt.Errorf("--probe-interval=%v: must be 0 (off) or at least 100ms", c.ProbeInterval)
	}
	if c.ProbePeers < 1 || c.ProbePeers > 1000 {
		return fmt.Errorf("--probe-peers=%d: must be between 1 and 1000", c.ProbePeers)
	}
	switch c.TxChecksumOffload {
	case OffloadAuto, OffloadOn, OffloadOff:
	default:
		return fmt.Errorf("--vxlan-tx-checksum-offload=%q: must be auto, on or off", c.TxChecksumOffload)
	}
	return nil
}

// listFlag is a comma-separated list that replaces its default when set.
type listFlag struct{ p *[]string }

func (f listFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f listFlag) Set(s string) error {
	*f.p = splitList(s)
	return nil
}

// appendFlag is a list that grows with each use of the flag (and with commas).
type appendFlag struct{ p *[]string }

func (f appendFlag) String() string {
	if f.p == nil {
		return ""
	}
	return strings.Join(*f.p, ",")
}

func (f appendFlag) Set(s string) error {
	*f.p = append(*f.p, splitList(s)...)
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}

// minutesFlag is a duration given in whole minutes, as flanneld takes it ("60"); a Go
// duration ("90m") is accepted too.
type minutesFlag struct{ p *time.Duration }

func (f minutesFlag) String() string {
	if f.p == nil {
		return ""
	}
	return fmt.Sprint(int(f.p.Minutes()))
}

func (f minutesFlag) Set(s string) error {
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err == nil && fmt.Sprint(n) == s {
		*f.p = time.Duration(n) * time.Minute
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("not a number of minutes: %q", s)
	}
	*f.p = d
	return nil
}
