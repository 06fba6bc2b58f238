#!/bin/sh
# install-apiserver.sh DIR: build the kube-apiserver that the Kubernetes-mode
# tests (internal/kubetest) run into DIR, at the version pinned in this
# module's go.mod.
#
# The build takes 6 to 8 minutes and about 2 GB of memory on 2 cores, so it runs
# once: a stamp file in DIR records a hash of go.mod and go.sum, a cached DIR
# costs a few file reads, and bumping the pinned version (or changing this
# script) rebuilds.
set -eu

if [ $# -ne 1 ]; then
	echo "usage: $0 DIR" >&2
	exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
dir=$(cd "$1" && pwd)

stamp="$dir/.weft-kube-stamp"
want=$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -d' ' -f1)

if [ -x "$dir/kube-apiserver" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
	exit 0
fi

echo "install-apiserver: building kube-apiserver into $dir (several minutes, once)"
# Without the version stamped in, the server reports v0.0.0-master on /version;
# Kubernetes' own build sets these from git, which a module download has not.
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
pkg=k8s.io/component-base/version
ldflags="-s -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
# -mod=readonly keeps a stale go.sum from being rewritten behind our back.
# The binary goes to a temporary name first so that an interrupted build never
# leaves a truncated kube-apiserver next to a stale stamp.
rm -f "$stamp"
(cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags="$ldflags" \
	-o "$dir/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver)
mv "$dir/kube-apiserver.tmp" "$dir/kube-apiserver"
echo "$want" >"$stamp"
