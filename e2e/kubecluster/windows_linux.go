package kubecluster

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/weftnet/weft/e2e/winnode"
	"github.com/weftnet/weft/windows"
	"github.com/weftnet/weft/windows/hnsfile"
)

// WindowsNode is a Windows node of the cluster (e2e/winnode): weftd.exe in Kubernetes mode
// and kube-proxy.exe in kernelspace mode under Wine, against the node's simulated HNS,
// leasing from the cluster's API server beside the Linux nodes. The kubelet cannot run
// under Wine (it needs Windows' job objects and containers), so the node runs none: its
// Node object is registered as kubelet.exe registers one, and since no kubelet posts its
// status it is never Ready, the node lifecycle controller taints it unreachable and
// nothing is scheduled to it. Its pods are made as containerd makes them (RunPod) and
// published by the test as EndpointSlices.
type WindowsNode struct {
	*winnode.Node
	// Programs holds weft's Windows programs and the CNI plugins (winnode.BuildPrograms).
	Programs string
	// SourceVIP is the source VIP weftd.exe reserved for kube-proxy (sourceVip.json).
	SourceVIP netip.Addr
	// Proxy is kube-proxy.exe, run by weftctl.exe as dist/kubernetes/kube-proxy-windows.yaml
	// runs it.
	Proxy *winnode.KubeProxy

	daemonArgv []string
	proxyArgv  []string
}

// WindowsOptions describe a Windows node.
type WindowsOptions struct {
	// Repo is the repository, whose dist/ the node's programs are started from.
	Repo string
	// Programs is winnode.BuildPrograms' directory; KubeProxyExe kube-proxy.exe, built for
	// Windows (tools/kube/install-kube.sh ... kube-proxy.exe).
	Programs, KubeProxyExe string
	// DSR runs kube-proxy.exe with --enable-dsr, the DaemonSet's commented line.
	DSR bool
	// NetworkPolicy runs weftd.exe with --network-policy, the Windows DaemonSet's commented
	// line (the RBAC of dist/kubernetes/network-policy.yaml: DeployWeftWithPolicy).
	NetworkPolicy bool
}

// AddWindowsNode adds the Windows node name to the cluster, whose weft (DeployWeft) must
// be deployed: a network namespace of the underlay with a Wine prefix and an HNS of its own
// (a simulated host too for host-gw); its Node object, as kubelet.exe registers a Windows
// node (the labels kubernetes.io/os=windows, arch, hostname and windows-build; its
// InternalIP), given a podCIDR by the controller-manager; weftd.exe started with the
// Windows DaemonSet's flags (dist/kubernetes/weft.yaml) and weft's ConfigMap
// (net-conf.json, and cni-conf-windows.json installed as the node's CNI configuration, with
// the CNI plugins); once it is ready, kube-proxy.exe, started as the kube-proxy DaemonSet
// for Windows starts it. It returns when both run.
func (c *Cluster) AddWindowsNode(ctx context.Context, tb testing.TB, name string, opts WindowsOptions) (*WindowsNode, error) {
	cn, err := c.net.AddNode(name)
	if err != nil {
		return nil, err
	}
	c.windows = append(c.windows, cn)
	if err := defaultRoute(cn); err != nil {
		return nil, err
	}
	cfg, err := c.Client.CoreV1().ConfigMaps("kube-flannel").Get(ctx, "weft-cfg", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("node %s: weft's ConfigMap (is weft deployed?): %w", name, err)
	}
	netConf, conflist := cfg.Data["net-conf.json"], cfg.Data["cni-conf-windows.json"]
	if netConf == "" || conflist == "" {
		return nil, fmt.Errorf("node %s: weft-cfg has no net-conf.json or cni-conf-windows.json", name)
	}
	w := &WindowsNode{Node: winnode.Wrap(tb, cn, opts.Repo), Programs: opts.Programs}
	// HNS reports Windows Server 2022's version, to go with the build the Node says
	// (winnode.WindowsBuild): 14.0, as the e2e package's kube-proxy scene takes it (windowsServers
	// there: the first version with every feature hcsshim v0.15.0 names below 2025's; that
	// it is 2022's is unverified).
	w.Version = windows.Version{Major: 14, Minor: 0}
	hostGW := strings.Contains(netConf, `"host-gw"`)
	if hostGW {
		host, err := winnode.HostOf(cn)
		if err != nil {
			return nil, err
		}
		w.ServeHNS(host)
	} else {
		w.ServeHNS(nil)
	}
	// The DaemonSet's environment: NODE_NAME from spec.nodeName.
	w.Env = append(w.Env, "NODE_NAME="+name)
	if err := c.registerWindowsNode(ctx, w.Node); err != nil {
		return nil, err
	}

	pn := winnode.PodNetwork{Network: "flannel.4096", Delegate: "win-overlay", Overlay: true}
	if hostGW {
		pn = winnode.PodNetwork{Network: "cbr0", Delegate: "win-bridge"}
	}
	w.InstallPlugins(opts.Programs, "weft.exe", pn.Delegate+".exe", "host-local.exe")
	w.InstallConflist([]byte(conflist))
	w.UseSubnetFile()
	netConfPath := filepath.Join(cn.Dir, "net-conf.json")
	if err := os.WriteFile(netConfPath, []byte(netConf), 0o644); err != nil {
		return nil, err
	}
	w.daemonArgv = w.Wine(filepath.Join(opts.Programs, "weftd.exe"), "--kube-subnet-mgr",
		"--kubeconfig-file="+winnode.Path(c.adminKubeconfig), "--net-config-path="+winnode.Path(netConfPath),
		"--subnet-file="+w.WinSubnetFile)
	if opts.NetworkPolicy {
		w.daemonArgv = append(w.daemonArgv, "--network-policy")
	}
	if err := w.StartWeftd(); err != nil {
		return nil, err
	}
	files, err := hnsfile.Read(w.SubnetFile)
	if err != nil || files.SourceVIP.IsValid() == hostGW {
		return nil, fmt.Errorf("node %s: the files next to subnet.env: %+v, %v; want a source VIP on overlay only", name, files, err)
	}
	w.SourceVIP = files.SourceVIP

	w.InstallKubeProxy(opts.KubeProxyExe)
	shipped, err := winnode.ShippedKubeProxy(opts.Repo)
	if err != nil {
		return nil, err
	}
	if w.proxyArgv, err = w.KubeProxyCommand(shipped, opts.Programs); err != nil {
		return nil, err
	}
	// The service account's in-cluster configuration is the administrator's here (no
	// token is mounted), as for the Linux nodes' kubelets.
	w.proxyArgv = append(w.proxyArgv, "--kubeconfig="+winnode.Path(c.adminKubeconfig), "--v=2")
	if opts.DSR {
		w.proxyArgv = append(w.proxyArgv, "--enable-dsr=true")
	}
	if err := w.StartKubeProxy(); err != nil {
		return nil, err
	}
	c.log.Logf("kubecluster: Windows node %s: %s, weftd.exe and kube-proxy.exe under Wine, logs in %s", name, cn.IP, cn.Dir)
	return w, nil
}

// registerWindowsNode creates the Node object of w as kubelet.exe registers a Windows node
// and waits until the controller-manager has given it a podCIDR.
func (c *Cluster) registerWindowsNode(ctx context.Context, w *winnode.Node) error {
	want := w.NodeObject(corev1.NodeSpec{})
	node, err := c.Client.CoreV1().Nodes().Create(ctx, want, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("registering the Windows node %s: %w", w.Name, err)
	}
	// The controller-manager writes the Node too (its podCIDR): the status is written again
	// on a conflict, over the latest object.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		node.Status = want.Status
		_, err := c.Client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, gerr := c.Client.CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{}); gerr == nil {
				node = latest
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("the Windows node %s's status: %w", w.Name, err)
	}
	for {
		got, err := c.Client.CoreV1().Nodes().Get(ctx, w.Name, metav1.GetOptions{})
		if err == nil && got.Spec.PodCIDR != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the Windows node %s got no podCIDR from the controller-manager: %w", w.Name, errors.Join(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// StartWeftd starts weftd.exe and waits until it is ready.
func (w *WindowsNode) StartWeftd() error {
	if err := w.StartDaemon(w.daemonArgv...); err != nil {
		return err
	}
	return w.WaitReady(2 * time.Minute)
}

// StartKubeProxy starts kube-proxy.exe, its log in the node's kube-proxy.log.
func (w *WindowsNode) StartKubeProxy() error {
	p, err := w.Node.StartKubeProxy(w.proxyArgv, filepath.Join(w.Dir, "kube-proxy.log"))
	if err != nil {
		return err
	}
	w.Proxy = p
	return nil
}
