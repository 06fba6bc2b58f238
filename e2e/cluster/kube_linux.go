package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/internal/atomicfile"
	"github.com/weftnet/weft/internal/kubetest"
)

const (
	// APIServerHost is where a Kubernetes-mode cluster's API server serves: the underlay
	// bridge's address, which every node reaches over its eth0, as it reaches etcd.
	APIServerHost = UnderlayGateway
	// APIServerPort is kube-apiserver's usual secure port.
	APIServerPort = 6443
	// APIServerURL is the API server's URL as the nodes' kubeconfigs name it.
	APIServerURL = "https://" + APIServerHost + ":6443"

	// Files of a Kubernetes-mode node, in its directory.
	kubeconfigFile = "kubeconfig"
	netConfFile    = "net-conf.json"
	tokenFile      = "token"
)

// KubeOptions put a cluster in Kubernetes mode: each weftd runs with --kube-subnet-mgr and
// NODE_NAME set to its node's name, reads the network config (Options.NetConf) from
// net-conf.json in its node's directory and reaches the API server with the kubeconfig that
// Kubeconfig returns. No --etcd-endpoints is given.
//
// The harness neither runs the API server nor makes Node objects: the caller does both.
// After New it starts kube-apiserver inside the underlay (UnderlayCommand runs a process
// there, DialUnderlay reaches it from this process), serving APIServerURL and storing in the
// cluster's etcd (EtcdURL) under a prefix of its own, and stops it when done; before AddNode
// it creates the Node object named after the node, with its podCIDR.
type KubeOptions struct {
	// Kubeconfig returns the kubeconfig file (see Kubeconfig) of the node's weftd. AddNode
	// calls it once, before weftd first starts. Required.
	Kubeconfig func(n *Node) ([]byte, error)
	// AnnotationPrefix, if set, is passed as --kube-annotation-prefix.
	AnnotationPrefix string
}

// kubeconfig is the part of a kubeconfig file a weftd needs: one cluster, one user with a
// bearer token (or the file holding one), one context joining them.
type kubeconfig struct {
	APIVersion     string            `json:"apiVersion"`
	Kind           string            `json:"kind"`
	Clusters       []kubeconfigNamed `json:"clusters"`
	Users          []kubeconfigNamed `json:"users"`
	Contexts       []kubeconfigNamed `json:"contexts"`
	CurrentContext string            `json:"current-context"`
}

// kubeconfigNamed is an entry of one of a kubeconfig's lists; exactly one pointer is set.
type kubeconfigNamed struct {
	Name    string             `json:"name"`
	Cluster *kubeconfigCluster `json:"cluster,omitempty"`
	User    *kubeconfigUser    `json:"user,omitempty"`
	Context *kubeconfigContext `json:"context,omitempty"`
}

type kubeconfigCluster struct {
	Server string `json:"server"`
	// CA is PEM; encoding/json writes []byte as base64, which is what this key holds.
	CA []byte `json:"certificate-authority-data"`
}

type kubeconfigUser struct {
	Token     string `json:"token,omitempty"`
	TokenFile string `json:"tokenFile,omitempty"`
}

type kubeconfigContext struct {
	Cluster string `json:"cluster"`
	User    string `json:"user"`
}

// Kubeconfig encodes a kubeconfig file for a client that reaches server, trusts the PEM CA
// certificates ca and authenticates with a bearer token. It is JSON, which kubeconfig
// readers take as the YAML it also is.
func Kubeconfig(server string, ca []byte, token string) ([]byte, error) {
	return encodeKubeconfig(server, ca, kubeconfigUser{Token: token})
}

// KubeconfigTokenFile is Kubeconfig for a client that reads its bearer token from the file
// at path, as a pod reads its projected service-account token: a new token written there
// (Node.WriteToken) is taken up without a restart.
func KubeconfigTokenFile(server string, ca []byte, path string) ([]byte, error) {
	return encodeKubeconfig(server, ca, kubeconfigUser{TokenFile: path})
}

// encodeKubeconfig encodes the kubeconfig of Kubeconfig with user as its user.
func encodeKubeconfig(server string, ca []byte, user kubeconfigUser) ([]byte, error) {
	if server == "" || len(ca) == 0 || user == (kubeconfigUser{}) {
		return nil, errors.New("kubeconfig: a server, a CA and a token (or token file) are all required")
	}
	const name = "weft-e2e"
	data, err := json.MarshalIndent(kubeconfig{
		APIVersion:     "v1",
		Kind:           "Config",
		Clusters:       []kubeconfigNamed{{Name: name, Cluster: &kubeconfigCluster{Server: server, CA: ca}}},
		Users:          []kubeconfigNamed{{Name: name, User: &user}},
		Contexts:       []kubeconfigNamed{{Name: name, Context: &kubeconfigContext{Cluster: name, User: name}}},
		CurrentContext: name,
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding a kubeconfig for %s: %w", server, err)
	}
	return data, nil
}

// Kube reports whether the cluster runs in Kubernetes mode.
func (c *Cluster) Kube() bool { return c.opts.Kube != nil }

// UnderlayCommand is the command prefix that runs a program inside the underlay namespace:
// `ip netns exec <underlay>`, which execs the program in place, so that the process started
// is the program itself and a kill reaches it.
func (c *Cluster) UnderlayCommand() []string { return append([]string{"ip"}, netnsExecArgs(c.ul)...) }

// DialUnderlay connects from this process to an address that exists only inside the
// underlay (etcd, the API server): the harness runs in the host namespace.
func (c *Cluster) DialUnderlay(ctx context.Context, network, address string) (net.Conn, error) {
	return dialIn(ctx, c.ul, network, address)
}

// APIServerOptions are the kubetest options of the cluster's API server: kube-apiserver run
// inside the underlay, serving APIServerURL, storing in the cluster's etcd under etcdPrefix
// (apart from the etcd-mode keys), reached from this process through the underlay.
func (c *Cluster) APIServerOptions(etcdPrefix string) kubetest.Options {
	return kubetest.Options{
		Addr:        netip.MustParseAddr(APIServerHost),
		Port:        APIServerPort,
		EtcdServers: []string{EtcdURL},
		EtcdPrefix:  etcdPrefix,
		Command:     c.UnderlayCommand(),
		Dial:        c.DialUnderlay,
	}
}

// PodCIDR is the podCIDR of node n<i> in a Kubernetes-mode cluster: 10.244.<i>.0/24, as
// kube-controller-manager would give with --cluster-cidr=10.244.0.0/16.
func PodCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24)
}

// PodCIDR6 is node n<i>'s IPv6 podCIDR in a dual-stack cluster: fd00:10:244:<i>::/64, in
// the IPv6 network fd00:10:244::/56.
func PodCIDR6(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, 0, 0x10, 0x02, 0x44, 0, byte(i)}), 64)
}

// CreateNode creates the Node object called name with its podCIDRs (the first is also its
// podCIDR) and the annotations given, as the kubelet and kube-controller-manager would before
// weftd starts on it.
func CreateNode(ctx context.Context, cs kubernetes.Interface, name string, annotations map[string]string, cidrs ...netip.Prefix) error {
	if len(cidrs) == 0 {
		return fmt.Errorf("creating Node %s: no podCIDR", name)
	}
	var all []string
	for _, c := range cidrs {
		all = append(all, c.String())
	}
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec:       corev1.NodeSpec{PodCIDR: all[0], PodCIDRs: all},
	}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating Node %s with podCIDRs %v: %w", name, all, err)
	}
	return nil
}

// setKubeFiles sets the paths of the node's Kubernetes-mode files.
func (n *Node) setKubeFiles() {
	n.KubeconfigPath = filepath.Join(n.Dir, kubeconfigFile)
	n.NetConfPath = filepath.Join(n.Dir, netConfFile)
	n.TokenPath = filepath.Join(n.Dir, tokenFile)
}

// WriteToken writes a bearer token to the node's TokenPath, for a kubeconfig that reads it
// from there (KubeconfigTokenFile). The file is replaced by a rename, as the kubelet replaces
// a projected token, so that a reader sees the old token or the new one, whole. It may be
// called from KubeOptions.Kubeconfig, before weftd first starts, and again to rotate it.
func (n *Node) WriteToken(token string) error {
	if n.TokenPath == "" {
		return fmt.Errorf("node %s: a token file is for Kubernetes mode", n.Name)
	}
	// 0600, as its kubeconfig: it is a credential.
	if err := atomicfile.Write(n.TokenPath, []byte(token), 0o600); err != nil {
		return fmt.Errorf("node %s: writing its token: %w", n.Name, err)
	}
	return nil
}

// writeKubeFiles writes the node's net-conf.json and kubeconfig, which weftd reads at start.
func (n *Node) writeKubeFiles() error {
	if err := os.WriteFile(n.NetConfPath, []byte(n.c.opts.NetConf), 0o644); err != nil {
		return fmt.Errorf("node %s: writing the network config: %w", n.Name, err)
	}
	kc, err := n.c.opts.Kube.Kubeconfig(n)
	if err != nil {
		return fmt.Errorf("node %s: making its kubeconfig: %w", n.Name, err)
	}
	// 0600: it holds a bearer token.
	if err := os.WriteFile(n.KubeconfigPath, kc, 0o600); err != nil {
		return fmt.Errorf("node %s: writing its kubeconfig: %w", n.Name, err)
	}
	return nil
}

// kubeArgs are weftd's datastore flags in Kubernetes mode, in place of the etcd ones.
func (n *Node) kubeArgs() []string {
	args := []string{
		"--kube-subnet-mgr",
		"--kubeconfig-file=" + n.KubeconfigPath,
		"--net-config-path=" + n.NetConfPath,
	}
	if p := n.c.opts.Kube.AnnotationPrefix; p != "" {
		args = append(args, "--kube-annotation-prefix="+p)
	}
	return args
}

// kubeEnv is weftd's environment in Kubernetes mode: this process's, plus the node's name
// as a DaemonSet sets it from spec.nodeName. exec uses the last of duplicate keys, so a
// NODE_NAME of this process cannot win.
func (n *Node) kubeEnv() []string {
	return append(os.Environ(), "NODE_NAME="+n.Name)
}
