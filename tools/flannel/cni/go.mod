// flannel's CNI plugin, for the e2e cluster that starts on flannel (e2e/kubecluster's
// migration test): flannel-io/cni-plugin, what flannel's kube-flannel.yml installs, is not
// served by the module proxy this project builds from; its ancestor is, the flannel plugin of
// containernetworking/plugins up to v0.9.1, from which flannel-io/cni-plugin was split off in
// 2021 with the same behaviour for one IPv4 network (read subnet.env, delegate to bridge with
// host-local, keep the delegate's configuration under /var/lib/cni/flannel). It speaks CNI up
// to 0.4.0, not 1.0.0. A module of its own because it needs the old CNI library, v0.8.
// Installed by ../install-flannel-kube.sh.
module github.com/weftnet/weft/tools/flannel/cni

go 1.26.0

tool github.com/containernetworking/plugins/plugins/meta/flannel

require (
	github.com/Microsoft/go-winio v0.4.11 // indirect
	github.com/Microsoft/hcsshim v0.8.6 // indirect
	github.com/buger/jsonparser v0.0.0-20180808090653-f4dd9f5a6b44 // indirect
	github.com/containernetworking/cni v0.8.1 // indirect
	github.com/containernetworking/plugins v0.9.1 // indirect
	github.com/sirupsen/logrus v1.0.6 // indirect
	golang.org/x/crypto v0.0.0-20200622213623-75b288015ac9 // indirect
	golang.org/x/sys v0.0.0-20201117170446-d9b008d0a637 // indirect
)
