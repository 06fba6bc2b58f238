package daemon

import (
	"context"
	"errors"
	"flag"
	"log/slog"

	"github.com/weftnet/weft/backend"
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
	// NodeName is the name of this node's Node object, from the environment (NODE_NAME, as
	// flanneld takes it; a DaemonSet sets it from spec.nodeName).
	NodeName string
}

// DefaultKubeConfig is flanneld's defaults.
func DefaultKubeConfig() KubeConfig {
	return KubeConfig{KubeAnnotationPrefix: kube.DefaultAnnotationPrefix, NetConfigPath: kube.DefaultNetConfPath}
}

// AddFlags registers the Kubernetes-mode flags on fs, writing into k.
func (k *KubeConfig) AddFlags(fs *flag.FlagSet) {
	fs.BoolVar(&k.KubeSubnetMgr, "kube-subnet-mgr", k.KubeSubnetMgr, "take the subnet and the peers from the Kubernetes API instead of etcd")
	fs.StringVar(&k.KubeconfigFile, "kubeconfig-file", k.KubeconfigFile, "kubeconfig to reach the API server with (default: the pod's service account)")
	fs.StringVar(&k.KubeAPIURL, "kube-api-url", k.KubeAPIURL, "API server URL, over the kubeconfig's")
	fs.StringVar(&k.KubeAnnotationPrefix, "kube-annotation-prefix", k.KubeAnnotationPrefix, "prefix of the node annotations that hold the leases")
	fs.StringVar(&k.NetConfigPath, "net-config-path", k.NetConfigPath, "network config file (net-conf.json) in Kubernetes mode")
}

// Validate checks the Kubernetes-mode settings when that mode is on; errors name the flag.
func (k *KubeConfig) Validate() error {
	if !k.KubeSubnetMgr {
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

// newKubeManager makes the Kubernetes-mode lease manager, its hooks feeding m. An address in
// the node's node-public-ip annotation replaces *publicIP, as it replaces flanneld's
// --public-ip; reading it waits, with the daemon's retry, until the API server answers and
// the Node exists.
func newKubeManager(ctx context.Context, k KubeConfig, publicIP *string, log *slog.Logger, m *metrics) (*kube.Manager, error) {
	km, err := kube.New(kube.Config{
		Kubeconfig:       k.KubeconfigFile,
		APIURL:           k.KubeAPIURL,
		AnnotationPrefix: k.KubeAnnotationPrefix,
		NetConfPath:      k.NetConfigPath,
		NodeName:         k.NodeName,
		Logger:           log,
		OnSkip:           func(string, error) { m.skipped.WithLabelValues(backend.SkipMalformed).Inc() },
		OnWatchRestart:   func(error) { m.watchRestarts.Inc() },
		OnRelist:         m.watchRelists.Inc,
	})
	if err != nil {
		return nil, err
	}
	ip, err := retry(ctx, log, "read the node's public IP annotation", func() (string, bool, error) {
		v4, _, err := km.NodePublicIPs(ctx)
		if err != nil || !v4.IsValid() {
			return "", false, err
		}
		return v4.String(), false, nil
	})
	if err != nil {
		return nil, err
	}
	if ip != "" {
		if *publicIP != "" && *publicIP != ip {
			log.Info("the node's node-public-ip annotation overrides --public-ip", "annotation", ip, "flag", *publicIP)
		}
		*publicIP = ip
	}
	return km, nil
}

// setReady tells the datastore that the node's network works, when the datastore wants to
// know (Kubernetes: NetworkUnavailable=False). It reports whether that is done; on a failure
// the caller tries again after its next convergence.
func setReady(ctx context.Context, sm subnet.Manager, log *slog.Logger) bool {
	r, ok := sm.(kube.Readier)
	if !ok {
		return true
	}
	if err := r.SetReady(ctx); err != nil {
		log.Warn("marking the node's network available failed; retrying after the next convergence", "err", err)
		return false
	}
	return true
}
