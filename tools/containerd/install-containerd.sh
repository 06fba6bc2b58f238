#!/bin/sh
# install-containerd.sh DIR: build containerd, containerd-shim-runc-v2 and ctr (which imports
# the nodes' images: no registry serves them), at the version pinned in this module's go.mod,
# into DIR, for the nodes of e2e/kubecluster; and install Debian's runc, the OCI runtime the
# shim runs, when it is missing.
#
# Without cgo, and without the btrfs, devmapper and zfs snapshotters (their packages need C
# headers and the nodes use overlayfs); about a minute cold on 2 cores. Built once: a stamp
# in DIR records a hash of go.mod, go.sum and this script.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"

if ! command -v runc >/dev/null 2>&1; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "install-containerd: runc is missing; run as root to install it" >&2
		exit 1
	fi
	echo "install-containerd: installing runc"
	DEBIAN_FRONTEND=noninteractive apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq runc >/dev/null
fi

if tool_current .weft-containerd-stamp "$here/go.mod" "$here/go.sum" "$0" &&
	[ -x "$dir/containerd" ] && [ -x "$dir/containerd-shim-runc-v2" ] && [ -x "$dir/ctr" ]; then
	exit 0
fi

mod=github.com/containerd/containerd/v2
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' $mod)
echo "install-containerd: building containerd $version into $dir"
# containerd's Makefile stamps its version so; `containerd --version` and the CRI's
# Version answer (which the kubelet logs) say which one runs.
ldflags="-s -X $mod/version.Version=$version -X $mod/version.Package=$mod"
rm -f "$stamp"
for prog in containerd containerd-shim-runc-v2 ctr; do
	# Built beside its final name and renamed: an interrupted build leaves no half-written
	# program for the stamp check to take as installed.
	(cd "$here" && CGO_ENABLED=0 nice go build -mod=readonly -trimpath -tags no_btrfs,no_devmapper,no_zfs \
		-ldflags "$ldflags" -o "$dir/$prog.tmp" "$mod/cmd/$prog")
	mv -f "$dir/$prog.tmp" "$dir/$prog"
done
if ! "$dir/containerd" --version | grep -q " $version "; then
	echo "install-containerd: $dir/containerd --version does not say $version" >&2
	exit 1
fi
echo "$want" >"$stamp"
