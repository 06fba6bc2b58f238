// Package winnode is the Windows node of the e2e clusters: a node of e2e/cluster whose
// programs (weftd.exe or the real flanneld.exe, kube-proxy.exe, the CNI plugins through
// wincni.exe) run under Wine, in a Wine prefix of the node's own, against a simulated HNS:
// the in-memory HNS (windows/hnstest) behind the simulated HNS service (internal/hnssim),
// listening on the node's loopback, which the simulated DLLs that tools/wine/setup.sh puts in
// the prefix call. No packet crosses to it: the node has no data plane, only HNS's objects.
//
// It serves the netns clusters of package e2e and the real Kubernetes cluster of
// e2e/kubecluster alike: the node itself (Wrap, ServeHNS, Wine), its programs (BuildPrograms,
// InstallPlugins, InstallConflist), a pod made as containerd makes one (RunPod), kube-proxy.exe
// as weft's DaemonSet starts it (ShippedKubeProxy, StartKubeProxy), and what kube-proxy must
// have made in HNS for a set of Services (CheckServices).
//
// The package is Linux-only; on other systems it holds only this documentation.
package winnode
