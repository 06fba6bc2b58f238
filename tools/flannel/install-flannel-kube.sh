#!/bin/sh
# install-flannel-kube.sh DIR: build what flannel's Kubernetes images hold beside flanneld
# (install-flanneld.sh) into DIR, for the e2e cluster that starts on flannel and migrates to
# weft (e2e/kubecluster):
#   install-conf  flannel's installer of the CNI configuration (its image's /opt/bin), from
#                 this module's flannel, built without cgo as flannel's Dockerfile builds it
#   flannel       flannel's CNI plugin, from ./cni's module (see its go.mod for which one)
#
# Idempotent and fast when nothing changed: a stamp file in DIR records a hash of both
# modules' go.mod and go.sum and of this script. A cold build takes about a minute.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"
if tool_current .weft-flannel-kube-stamp "$here/go.mod" "$here/go.sum" "$here/cni/go.mod" "$here/cni/go.sum" "$0" &&
	[ -x "$dir/install-conf" ] && [ -x "$dir/flannel" ]; then
	exit 0
fi

echo "install-flannel-kube: building install-conf and flannel's CNI plugin into $dir"
# Each binary is built beside its final name and renamed, so that an interrupted build never
# leaves a half-written one that the stamp check would take for installed; -mod=readonly
# keeps a stale go.sum from being rewritten behind our back.
(cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$dir/install-conf.tmp" \
	github.com/flannel-io/flannel/cmd/install_conf)
(cd "$here/cni" && CGO_ENABLED=0 go build -mod=readonly -trimpath -o "$dir/flannel.tmp" \
	github.com/containernetworking/plugins/plugins/meta/flannel)
mv -f "$dir/install-conf.tmp" "$dir/install-conf"
mv -f "$dir/flannel.tmp" "$dir/flannel"
echo "$want" >"$stamp"
