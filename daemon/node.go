package daemon

import (
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/weftnet/weft/backend"
	"github.com/weftnet/weft/netif"
	"github.com/weftnet/weft/subnet"
	"github.com/weftnet/weft/subnet/etcd"
	"github.com/weftnet/weft/subnet/kube"
)

// The decisions weftd makes about its node from its Config, the network config and the data
// plane's capabilities, as functions of those alone: weftd makes them at start, and weftctl
// doctor makes them again to tell what weftd should have made.

// EtcdClient is how weftd reaches etcd (--etcd-*).
func (c Config) EtcdClient() etcd.ClientConfig {
	return etcd.ClientConfig{Endpoints: c.EtcdEndpoints, CAFile: c.EtcdCAFile, CertFile: c.EtcdCertFile, KeyFile: c.EtcdKeyFile,
		Username: c.EtcdUsername, Password: c.EtcdPassword}
}

// ManagerConfig is how weftd reaches the Kubernetes API in Kubernetes mode, without the
// daemon's hooks.
func (k KubeConfig) ManagerConfig() kube.Config {
	return kube.Config{Kubeconfig: k.KubeconfigFile, APIURL: k.KubeAPIURL, AnnotationPrefix: k.KubeAnnotationPrefix,
		NetConfPath: k.NetConfigPath, NodeName: k.NodeName}
}

// UseNodePublicIPs makes the addresses of the node's node-public-ip and node-public-ipv6
// annotations (Kubernetes mode; invalid where absent) its --public-ip and --public-ipv6, as
// flanneld takes them, over the flags.
func (c *Config) UseNodePublicIPs(v4, v6 netip.Addr, log *slog.Logger) {
	for _, flag := range []struct {
		name string
		ip   netip.Addr
		p    *string
	}{{"--public-ip", v4, &c.PublicIP}, {"--public-ipv6", v6, &c.PublicIPv6}} {
		if !flag.ip.IsValid() {
			continue
		}
		ip := flag.ip.String()
		if *flag.p != "" && *flag.p != ip {
			log.Info("the node's public IP annotation overrides "+flag.name, "annotation", ip, "flag", *flag.p)
		}
		*flag.p = ip
	}
}

// Choice is the choice of the external interface that weftd makes for the network net with
// its flags; routeTo is the OS's route lookup (nil where it has none).
func (c Config) Choice(net *subnet.Config, routeTo func(netip.Addr) (string, netip.Addr, error)) netif.Choice {
	return netif.Choice{Ifaces: c.Ifaces, Regexps: c.IfaceRegexs, CanReach: c.IfaceCanReach, RouteTo: routeTo,
		PublicIP: c.PublicIP, PublicIPv6: c.PublicIPv6, IPv4: net.EnableIPv4, IPv6: net.EnableIPv6}
}

// NewBackends builds the backend of each family net enables (IPv4 first) for a node whose
// external interface is ext, on a data plane of capabilities caps, and returns the pods'
// MTU with them: the smallest the families' backends allow. wgKey is the node's WireGuard
// private key (wireguard only).
func NewBackends(net *subnet.Config, ext netif.External, caps backend.Capabilities, wgKey backend.Key) ([]*backend.Backend, int, error) {
	node := backend.Node{Underlay: ext.Name, Addr: ext.Addr, Addr6: ext.Addr6, MTU: ext.MTU,
		Connected: ext.Connected, PublicIP: ext.PublicIP, PublicIPv6: ext.PublicIPv6, WireGuardKey: wgKey}
	var bs []*backend.Backend
	mtu := 0
	for _, f := range backend.Families(net) {
		b, err := backend.NewFor(net, node, caps, f)
		if err != nil {
			return nil, 0, err
		}
		bs = append(bs, b)
		if mtu == 0 || b.MTU() < mtu {
			mtu = b.MTU()
		}
	}
	if len(bs) == 0 {
		return nil, 0, fmt.Errorf("the network config enables no IP family")
	}
	return bs, mtu, nil
}

// Env is the subnet.env weftd writes for the node holding own, with the pods' MTU mtu and
// --ip-masq.
func Env(net *subnet.Config, own subnet.Lease, mtu int, ipMasq bool) subnet.Env {
	var network, network6 netip.Prefix
	if net.EnableIPv4 {
		network = net.Network
	}
	if net.EnableIPv6 {
		network6 = net.IPv6Network
	}
	return subnet.NewEnv(network, own.Subnet, network6, own.IPv6Subnet, mtu, ipMasq)
}
