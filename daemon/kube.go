package daemon

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"math"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/events"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/kube"
)

// KubeConfig is the Kubernetes mode of weftd (--kube-subnet-mgr): the node's subnet is its
// podCIDR, every node's lease lives in its Node's annotations, the network config is a file.
// Config embeds it; the flags are flanneld's.
type KubeConfig struct {
	KubeSubnetMgr        bool
	KubeconfigFile       string
	KubeAPIURL           string
	KubeAnnotationPrefix string
	NetConfigPath        string
	// SetNodeNetworkUnavailable: the Node's NetworkUnavailable condition is set False once the
	// data plane converged (flanneld's --set-node-network-unavailable, true by default); false
	// leaves the condition to whoever else manages it.
	SetNodeNetworkUnavailable bool
	// NodeName is the name of this node's Node object, from the environment (NODE_NAME, as
	// flanneld takes it; a DaemonSet sets it from spec.nodeName).
	NodeName string
	// NetworkPolicy enforces the NetworkPolicy of the node's pods (--network-policy), where the
	// platform has a PolicyPlane.
	NetworkPolicy bool
}

// DefaultKubeConfig is flanneld's defaults.
func DefaultKubeConfig() KubeConfig {
	return KubeConfig{KubeAnnotationPrefix: kube.DefaultAnnotationPrefix, NetConfigPath: kube.DefaultNetConfPath,
		SetNodeNetworkUnavailable: true}
}

// AddFlags registers the Kubernetes-mode flags on fs, writing into k.
func (k *KubeConfig) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&k.KubeSubnetMgr, "kube-subnet-mgr", k.KubeSubnetMgr, "take the subnet and the peers from the Kubernetes API instead of etcd")
	fs.StringVar(&k.KubeconfigFile, "kubeconfig-file", k.KubeconfigFile, "kubeconfig to reach the API server with (default: the pod's service account)")
	fs.StringVar(&k.KubeAPIURL, "kube-api-url", k.KubeAPIURL, "API server URL, over the kubeconfig's")
	fs.StringVar(&k.KubeAnnotationPrefix, "kube-annotation-prefix", k.KubeAnnotationPrefix, "prefix of the node annotations that hold the leases")
	fs.BoolVar(&k.SetNodeNetworkUnavailable, "set-node-network-unavailable", k.SetNodeNetworkUnavailable, "set the Node's NetworkUnavailable condition False once the data plane converged; false leaves it alone")
	fs.StringVar(&k.NetConfigPath, "net-config-path", k.NetConfigPath, "network config file (net-conf.json) in Kubernetes mode")
	fs.BoolVar(&k.NetworkPolicy, "network-policy", k.NetworkPolicy, "enforce the NetworkPolicy of this node's pods (Kubernetes mode; Linux: nftables table inet weft_policy); false removes that table")
}

// Validate checks the Kubernetes-mode settings when that mode is on; errors name the flag.
func (k *KubeConfig) Validate() error {
	if !k.KubeSubnetMgr {
		if k.NetworkPolicy {
			return errors.New("--network-policy=true: needs --kube-subnet-mgr (the pods and policies come from the Kubernetes API)")
		}
		return nil
	}
	if k.NodeName == "" {
		return errors.New("NODE_NAME: not set; --kube-subnet-mgr needs the name of this node's Node object")
	}
	if k.NetConfigPath == "" {
		return errors.New("--net-config-path: empty")
	}
	return nil
}

// newKubeManager makes the Kubernetes-mode lease manager of cfg, its hooks feeding m and ev.
// The addresses in the node's node-public-ip and node-public-ipv6 annotations replace cfg's
// PublicIP and PublicIPv6 (UseNodePublicIPs); reading them waits, with the daemon's retry,
// until the API server answers and the Node exists.
func newKubeManager(ctx context.Context, cfg *Config, log *slog.Logger, m *metrics, ev Events) (*kube.Manager, error) {
	km, err := kube.New(kubeManagerConfig(cfg.KubeConfig, log, m, ev))
	if err != nil {
		return nil, err
	}
	ips, err := retry(ctx, log, "read the node's public IP annotations", func() ([2]netip.Addr, bool, error) {
		v4, v6, err := km.NodePublicIPs(ctx)
		return [2]netip.Addr{v4, v6}, false, err
	})
	if err != nil {
		return nil, err
	}
	cfg.UseNodePublicIPs(ips[0], ips[1], log)
	return km, nil
}

// kubeManagerConfig is the config of the Kubernetes-mode lease manager for k, its hooks
// feeding m and ev: a Node whose lease cannot be read is a skipped peer, by its name.
func kubeManagerConfig(k KubeConfig, log *slog.Logger, m *metrics, ev Events) kube.Config {
	c := k.ManagerConfig()
	c.Logger = log
	c.OnSkip = func(node string, _ error) {
		m.skipped.WithLabelValues(backend.SkipMalformed).Inc()
		ev.PeerSkipped(backend.SkipMalformed, node)
	}
	c.OnWatchRestart = func(error) { m.watchRestarts.Inc() }
	c.OnRelist = m.watchRelists.Inc
	return c
}

// eventSink is where the events Recorder posts in Kubernetes mode: each events.Event becomes
// what a core/v1 Event says, which km creates about the node's Node, or about the object the
// Event regards.
func eventSink(km *kube.Manager) events.Sink {
	return func(ctx context.Context, e events.Event) error {
		ev := &corev1.Event{Type: e.Type, Reason: e.Reason, Message: e.Message,
			Count: int32(min(e.Count, math.MaxInt32)), FirstTimestamp: metav1.NewTime(e.First), LastTimestamp: metav1.NewTime(e.Last)}
		if o := e.Regarding; o != (events.Object{}) {
			ev.InvolvedObject = corev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace,
				Name: o.Name, UID: types.UID(o.UID)}
		}
		return km.PostEvent(ctx, ev)
	}
}

// setReady tells the datastore that the node's network works, when the datastore wants to
// know (Kubernetes: NetworkUnavailable=False). It reports whether that is done; on a failure
// the caller tries again after its next convergence.
func setReady(ctx context.Context, sm subnet.Manager, log *slog.Logger) bool {
	r, ok := sm.(subnet.Readier)
	if !ok {
		return true
	}
	if err := r.SetReady(ctx); err != nil {
		log.Warn("marking the node's network available failed; retrying after the next convergence", "err", err)
		return false
	}
	return true
}
