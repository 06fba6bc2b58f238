#!/bin/sh
# install-cni.sh DIR: install the reference CNI plugins the e2e tests and the
# demo use (bridge, host-local), and those a Kubernetes node ships beside them
# for weft's conflist and containerd (portmap, loopback: e2e/kubecluster), into
# DIR, at the versions pinned in this module's go.mod.
#
# Idempotent and fast when nothing changed: a stamp file in DIR records a hash
# of go.mod and go.sum, so a cached DIR costs two file reads, and bumping the
# pinned version reinstalls.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/install-lib.sh"
tool_dir "$@"

plugins="bridge host-local loopback portmap"
pkgs="github.com/containernetworking/plugins/plugins/main/bridge
github.com/containernetworking/plugins/plugins/ipam/host-local
github.com/containernetworking/plugins/plugins/main/loopback
github.com/containernetworking/plugins/plugins/meta/portmap"

have_all=true
for p in $plugins; do
	[ -x "$dir/$p" ] || have_all=false
done
if tool_current .weft-tools-stamp "$here/go.mod" "$here/go.sum" && $have_all; then
	exit 0
fi

echo "install-cni: building $plugins into $dir"
# GOFLAGS from a caller (the Makefile exports -buildvcs=false) apply here too;
# -mod=readonly keeps a stale go.sum from being rewritten behind our back.
# CGO is off so the plugins run in any namespace without a libc surprise.
# shellcheck disable=SC2086 # pkgs is a newline-separated list on purpose
(cd "$here" && CGO_ENABLED=0 GOBIN="$dir" go install -mod=readonly $pkgs)

for p in $plugins; do
	if [ ! -x "$dir/$p" ]; then
		echo "install-cni: $dir/$p missing after go install" >&2
		exit 1
	fi
done
echo "$want" >"$stamp"
