// Package dist holds weft as users install it, and the tests that keep it installable. It
// has no Go API; the files are:
//
//   - systemd/weftd.service, systemd/weftd.env: weftd under systemd (Type=notify);
//   - net-conf.json: a sample network config, VXLAN with VNI 4096 on port 4789, which
//     clusters with Windows nodes need;
//   - cni/: the CNI configurations for Linux and Windows nodes (flannel's, with the type
//     weft);
//   - kubernetes/weft.yaml: everything for `kubectl apply -f`, with a verbatim copy of
//     kubernetes/rbac.yaml;
//   - windows/install-weftd.ps1: weftd as a Windows service, or only the CNI plugin;
//   - image/: the builder of the Linux image (`make image`), three static binaries in an
//     OCI image layout, no shell;
//   - Dockerfile: the Windows HostProcess image.
//
// The tests run `systemd-analyze verify` on the unit, create every Kubernetes object with a
// server-side dry run on a real kube-apiserver (internal/kubetest), parse the configs with
// weft's own parsers, check that every flag the files give weftd is one it has, run the
// Linux DaemonSet's CNI installer on a scratch node, check the Dockerfile statically (no
// container engine runs here), and, as root, build the Linux image, unpack it and run the
// DaemonSet's containers in it with runc.
package dist
