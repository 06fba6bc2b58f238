// Package kubecluster builds a Kubernetes cluster from real parts inside one Linux machine,
// for the tests that judge weft as its users run it (issue 19): the underlay, etcd and node
// network namespaces of e2e/cluster; kube-apiserver (internal/kubetest), kube-controller-manager
// and kube-scheduler inside the underlay namespace, serving https://192.0.2.1:6443; and worker
// nodes, each a network namespace of e2e/cluster with a mount namespace of its own, in which its
// containerd and kubelet run.
//
// A node's mount namespace is pinned to a file in its directory (unshare --mount=FILE) and
// entered with nsenter for every program the node runs, as is its UTS namespace, whose host
// name is the node's: host-network pods answer with their node's name, as on a real machine. In it, the directories a node owns are
// bind mounts of the node's directory: /etc/cni/net.d, /opt/cni/bin, /var/lib/cni,
// /var/lib/kubelet, /var/log/pods, /var/log/containers, /run/containerd and /run/flannel. The
// host keeps an empty directory at each of these paths (a bind mount needs one to mount over);
// nothing of a node is written there. containerd keeps its root in the node's directory, its
// state and socket in the node's /run/containerd and its pods' network namespaces under its
// state (netns_mounts_under_state_dir), so that nodes share nothing but the kernel.
//
// The host mounts cgroup v1 (hybrid), which the kubelet refuses from 1.35 unless told
// (failCgroupV1: false); it runs with the cgroupfs driver, QoS cgroups under a cgroupRoot of
// its own node (cgroup_linux.go), without node allocatable enforcement, and with swap allowed:
// the checks MACHINE.md records. Each node's programs and pods are in that cgroup tree, which
// Close removes, killing what is left, and which a later run sweeps when a killed run left it.
//
// The programs come from tools/kube/install-kube.sh (the Kubernetes ones, at the
// kube-apiserver's version) and tools/containerd/install-containerd.sh (containerd 2, which a
// 1.36 kubelet needs, its runc shim and Debian's runc). Everything a cluster starts is killed
// when it closes: the control plane's processes, and every process of a node's network or mount
// namespace with all their descendants (containerd's shims re-parent themselves, and the
// containers are the shims' children), before e2e/cluster removes the namespaces.
//
// The images come without a registry: built here, written as image archives and imported
// into each node's containerd. BaseImages makes the pause image and weft's; E2EImages those
// the e2e tests run, named as the e2e framework of tools/kube's release expects them:
// agnhost (built from k8s.io/kubernetes, with the tools its image holds from Debian's
// packages), busybox (Debian's busybox-static), the pause image under the framework's tag,
// and CoreDNS (tools/coredns), which DeployCoreDNS deploys as kubeadm does.
//
// weft is deployed as its users deploy it: DeployWeft applies dist/kubernetes, HelmInstallWeft
// installs dist/helm/weft. A cluster can also start on flannel, as the clusters weft replaces
// do: FlannelImages makes flannel's images (flanneld v0.28.10 with Debian's iptables, and
// flannel's CNI plugin, from tools/flannel), DeployFlannel applies testdata/kube-flannel.yml,
// flannel's kube-flannel.yml of that release with the differences it names. StartPings runs
// a mesh of 10 ms pings between pods, counted in the pods' network namespaces, for the
// changes that must not interrupt traffic (the migration from flannel).
//
// A cluster can have a Windows node beside its Linux ones (AddWindowsNode, windows_linux.go):
// weftd.exe in Kubernetes mode and kube-proxy.exe under Wine against a simulated HNS
// (e2e/winnode), started from weft's ConfigMap and DaemonSets as deployed; no kubelet, so
// its Node, registered as kubelet.exe registers one, is never Ready and nothing is scheduled
// to it.
//
// The package is Linux-only; on other systems it holds only this documentation.
package kubecluster
