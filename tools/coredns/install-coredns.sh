#!/bin/sh
# install-coredns.sh DIR: build CoreDNS, with every plugin of its release (what its image
# holds), at the version pinned in this module's go.mod, into DIR, for the cluster DNS of
# e2e/kubecluster: kubeadm deploys that release for the Kubernetes version tools/kube pins.
#
# Its own module, as tools/kube: the cloud SDKs of its plugins stay out of the root module.
# About 1,000 packages of its own; a cold build takes minutes on 2 cores, so it is built
# once: a stamp in DIR records a hash of go.mod, go.sum and this script. Without cgo, as
# CoreDNS's release builds.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"

if tool_current .weft-coredns-stamp "$here/go.mod" "$here/go.sum" "$0" && [ -x "$dir/coredns" ]; then
	exit 0
fi

mod=github.com/coredns/coredns
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' $mod)
echo "install-coredns: building coredns $version into $dir (minutes, once)"
start=$(date +%s)
rm -f "$stamp"
# Built beside its final name and renamed: an interrupted build leaves no half-written
# program for the stamp check to take as installed.
(cd "$here" && CGO_ENABLED=0 nice go build -mod=readonly -trimpath -ldflags=-s -o "$dir/coredns.tmp" $mod)
mv -f "$dir/coredns.tmp" "$dir/coredns"
# CoreDNS's version is in its source (coremain.CoreVersion), not stamped: check it is the
# pinned one.
if ! "$dir/coredns" -version | grep -q "CoreDNS-${version#v}\$"; then
	echo "install-coredns: $dir/coredns -version does not say ${version#v}" >&2
	exit 1
fi
echo "$want" >"$stamp"
echo "install-coredns: coredns built in $(($(date +%s) - start)) s"
