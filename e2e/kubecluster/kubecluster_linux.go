package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftnet/weft/e2e/cluster"
	"github.com/weftnet/weft/internal/kubetest"
)

const (
	// etcdPrefix keeps the API server's objects apart from flannel's /coreos.com/network in
	// the underlay's etcd.
	etcdPrefix = "/weft-kubecluster/registry"
	// serviceCIDR is the Services' range; kubetest's API server serves it, and 10.96.0.1,
	// the kubernetes Service, is in its certificate.
	serviceCIDR = "10.96.0.0/16"
)

// Options describe a cluster.
type Options struct {
	// KubeBin holds kubelet, kube-controller-manager, kube-scheduler, kube-proxy and kubectl
	// (tools/kube/install-kube.sh). Required. kube-apiserver is kubetest's (kubetest.Binary).
	KubeBin string
	// ContainerdBin holds containerd, containerd-shim-runc-v2 and ctr
	// (tools/containerd/install-containerd.sh). Required.
	ContainerdBin string
	// NetConf is the network configuration (net-conf.json); ClusterCIDR must be inside its
	// Network. Default: dist/net-conf.json's, VXLAN in 10.244.0.0/16.
	NetConf string
	// ClusterCIDR is the controller-manager's --cluster-cidr, from which it gives each node a
	// /24 podCIDR. Default 10.244.0.0/16.
	ClusterCIDR netip.Prefix
	// DNSServiceIP is the cluster DNS address the kubelets give pods. Default 10.96.0.10.
	DNSServiceIP netip.Addr
	// Prefix names the namespaces, as cluster.Options.Prefix does. Default: a random one.
	Prefix string
}

// defaultNetConf is dist/net-conf.json's configuration.
const defaultNetConf = `{"Network": "10.244.0.0/16", "Backend": {"Type": "vxlan", "VNI": 4096, "Port": 4789}}`

// Cluster is a running Kubernetes cluster: control plane in the underlay, nodes in namespaces.
type Cluster struct {
	opts Options
	log  cluster.Logger
	net  *cluster.Cluster
	api  *kubetest.Server
	// adminKubeconfig is a kubeconfig with the API server's administrator token, which the
	// control plane and, for now, the kubelets use.
	adminKubeconfig   string
	controllerManager *process
	scheduler         *process
	nodes             []*Node
	// windows are the Windows nodes' namespaces (AddWindowsNode).
	windows []*cluster.Node
	// extra are the cluster's other programs (Prometheus), stopped before the nodes.
	extra []*process

	// Client is an administrator's client of the API server, usable from this process.
	Client kubernetes.Interface
}

// New starts the underlay with etcd (e2e/cluster), kube-apiserver, kube-controller-manager and
// kube-scheduler. Nodes are added with AddNode. If log has Cleanup (a *testing.T), Close is
// registered there, to run before the underlay goes; on error, what was started is stopped.
func New(log cluster.Logger, opts Options) (*Cluster, error) {
	if opts.KubeBin == "" || opts.ContainerdBin == "" {
		return nil, errors.New("kubecluster: Options.KubeBin and Options.ContainerdBin are required")
	}
	if opts.NetConf == "" {
		opts.NetConf = defaultNetConf
	}
	if !opts.ClusterCIDR.IsValid() {
		opts.ClusterCIDR = netip.MustParsePrefix("10.244.0.0/16")
	}
	if !opts.DNSServiceIP.IsValid() {
		opts.DNSServiceIP = netip.MustParseAddr("10.96.0.10")
	}
	for _, p := range []string{"kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.KubeBin, p)); err != nil {
			return nil, fmt.Errorf("kubecluster: %w (tools/kube/install-kube.sh builds it)", err)
		}
	}
	for _, p := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if _, err := os.Stat(filepath.Join(opts.ContainerdBin, p)); err != nil {
			return nil, fmt.Errorf("kubecluster: %w (tools/containerd/install-containerd.sh builds it)", err)
		}
	}
	net, err := cluster.New(log, cluster.Options{NetConf: opts.NetConf, Prefix: opts.Prefix})
	if err != nil {
		return nil, fmt.Errorf("kubecluster: %w", err)
	}
	// The containers of killed runs outlive their namespaces; their cgroups hold them.
	if err := sweepCgroups(func(prefix string) bool {
		m, _ := filepath.Glob(netnsPath(prefix + "-*"))
		return len(m) > 0
	}); err != nil {
		log.Logf("kubecluster: sweeping killed runs' cgroups: %v", err)
	}
	c := &Cluster{opts: opts, log: log, net: net}
	// Registered after cluster.New's cleanup, so that it runs first, while the namespaces
	// exist.
	if cl, ok := log.(interface{ Cleanup(func()) }); ok {
		cl.Cleanup(func() {
			if err := c.Close(); err != nil {
				log.Logf("kubecluster: %v", err)
			}
		})
	}
	if err := c.startControlPlane(); err != nil {
		if cerr := c.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing: %v)", err, cerr)
		}
		if cerr := net.Close(); cerr != nil {
			err = fmt.Errorf("%w (and closing: %v)", err, cerr)
		}
		return nil, err
	}
	return c, nil
}

// startControlPlane starts kube-apiserver, then the controller-manager and the scheduler, in
// the underlay.
func (c *Cluster) startControlPlane() error {
	dir := filepath.Join(c.net.Dir(), "control-plane")
	apiDir := filepath.Join(dir, "apiserver") // kubetest's PKI, token file and log
	if err := os.MkdirAll(apiDir, 0o755); err != nil {
		return fmt.Errorf("kubecluster: %w", err)
	}
	opts := c.net.APIServerOptions(etcdPrefix)
	opts.Args = []string{
		// Pods reach the API server through the kubernetes Service: its endpoints
		// must be kept (kubetest turns that off for servers no pod uses).
		"--endpoint-reconciler-type=lease",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--allow-privileged=true",
		// As kubeadm sets it: the nodes' names are in no DNS, and `kubectl exec`,
		// logs and port-forward go to the kubelet's address.
		"--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
	}
	api, err := kubetest.Launch(apiDir, opts)
	if err != nil {
		return fmt.Errorf("kubecluster: starting kube-apiserver: %w", err)
	}
	c.api = api
	admin := api.Admin()
	if c.Client, err = kubernetes.NewForConfig(admin); err != nil {
		return fmt.Errorf("kubecluster: API client: %w", err)
	}
	kc, err := cluster.Kubeconfig(cluster.APIServerURL, admin.CAData, admin.BearerToken)
	if err != nil {
		return fmt.Errorf("kubecluster: %w", err)
	}
	c.adminKubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := os.WriteFile(c.adminKubeconfig, kc, 0o600); err != nil {
		return fmt.Errorf("kubecluster: writing the admin kubeconfig: %w", err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, admin.CAData, 0o644); err != nil {
		return fmt.Errorf("kubecluster: writing the CA: %w", err)
	}
	auth := []string{
		"--kubeconfig=" + c.adminKubeconfig,
		"--authentication-kubeconfig=" + c.adminKubeconfig,
		"--authorization-kubeconfig=" + c.adminKubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
	}
	c.controllerManager, err = start("kube-controller-manager", filepath.Join(dir, "kube-controller-manager.log"), nil,
		append(c.net.UnderlayCommand(), append([]string{filepath.Join(c.opts.KubeBin, "kube-controller-manager")},
			append(auth,
				"--allocate-node-cidrs",
				"--cluster-cidr="+c.opts.ClusterCIDR.String(),
				"--node-cidr-mask-size=24",
				"--service-cluster-ip-range="+serviceCIDR,
				"--root-ca-file="+caFile,
				// weft's DaemonSet sets the routes; a cloud's route controller has no
				// place here.
				"--configure-cloud-routes=false",
				"--use-service-account-credentials=false",
			)...)...))
	if err != nil {
		return fmt.Errorf("kubecluster: %w", err)
	}
	c.scheduler, err = start("kube-scheduler", filepath.Join(dir, "kube-scheduler.log"), nil,
		append(c.net.UnderlayCommand(), append([]string{filepath.Join(c.opts.KubeBin, "kube-scheduler")}, auth...)...))
	if err != nil {
		return fmt.Errorf("kubecluster: %w", err)
	}
	c.log.Logf("kubecluster %s: control plane on %s, logs in %s", c.net.Prefix(), cluster.APIServerURL, dir)
	return nil
}

// AddNode adds a worker node named name (1 to 10 lower-case letters or digits) and waits
// until its containerd and kubelet answer; WaitNodes waits for it to register.
func (c *Cluster) AddNode(name string) (*Node, error) {
	for _, p := range []*process{c.controllerManager, c.scheduler} {
		if p.exited() {
			return nil, fmt.Errorf("kubecluster: %s exited; log %s:\n%s", p.name, p.logPath, p.tail())
		}
	}
	return c.addNode(name)
}

// Kubectl runs kubectl with the administrator's kubeconfig, inside the underlay where the API
// server's address is, and returns its output.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) (string, error) {
	argv := append(c.net.UnderlayCommand(), append([]string{filepath.Join(c.opts.KubeBin, "kubectl"),
		"--kubeconfig=" + c.adminKubeconfig}, args...)...)
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Nodes returns the nodes in the order they were added.
func (c *Cluster) Nodes() []*Node { return append([]*Node(nil), c.nodes...) }

// Dir is the cluster's directory: the control plane's logs, each node's files.
func (c *Cluster) Dir() string { return c.net.Dir() }

// WaitNodes waits until every node is registered with the API server and ok says it is as
// wanted (a podCIDR given, Ready), and returns the Node objects. The error names each node
// that is not, with the last reason ok gave.
func (c *Cluster) WaitNodes(ctx context.Context, ok func(*corev1.Node) error) ([]corev1.Node, error) {
	for {
		list, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		var notYet []string
		if err != nil {
			notYet = append(notYet, fmt.Sprintf("listing nodes: %v", err))
		} else {
			byName := map[string]*corev1.Node{}
			for i := range list.Items {
				byName[list.Items[i].Name] = &list.Items[i]
			}
			for _, n := range c.nodes {
				obj, found := byName[n.Name]
				switch {
				case !found:
					notYet = append(notYet, n.Name+": not registered")
				case ok != nil:
					if err := ok(obj); err != nil {
						notYet = append(notYet, fmt.Sprintf("%s: %v", n.Name, err))
					}
				}
			}
			if len(notYet) == 0 {
				return list.Items, nil
			}
		}
		for _, n := range c.nodes {
			if n.kubelet != nil && n.kubelet.exited() {
				return nil, fmt.Errorf("kubecluster: node %s: kubelet exited; log %s:\n%s", n.Name, n.kubelet.logPath, n.kubelet.tail())
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kubecluster: nodes not as wanted: %s: %w", strings.Join(notYet, "; "), ctx.Err())
		case <-time.After(time.Second):
		}
	}
}

// Close stops the nodes, then the control plane. e2e/cluster's Close removes the namespaces
// and etcd afterwards (New registers both with a *testing.T).
func (c *Cluster) Close() error {
	var errs []error
	for _, p := range c.extra {
		p.stop()
	}
	c.extra = nil
	for _, n := range c.nodes {
		if err := n.stop(); err != nil {
			errs = append(errs, err)
		}
	}
	c.nodes = nil
	if mounts, err := cgroupMounts(); err == nil {
		g := &cgroupTree{rel: "/" + cgroupBase + "/" + c.net.Prefix(), mounts: mounts}
		if err := g.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range []*process{c.scheduler, c.controllerManager} {
		if p != nil {
			p.stop()
		}
	}
	c.scheduler, c.controllerManager = nil, nil
	if c.api != nil {
		c.api.Close()
		c.api = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kubecluster: closing: %w", err)
	}
	return nil
}
