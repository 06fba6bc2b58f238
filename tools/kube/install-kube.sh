#!/bin/sh
# install-kube.sh DIR [PROGRAM...]: build Kubernetes programs into DIR, at the
# version of k8s.io/kubernetes pinned in this module's go.mod. PROGRAM is a
# program of k8s.io/kubernetes listed as a tool in go.mod, named by the last
# element of its package: the commands of cmd/ (kube-apiserver,
# kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl) and
# agnhost, the e2e tests' Swiss-army program (test/images/agnhost); without
# one, kube-apiserver, which the Kubernetes-mode tests (internal/kubetest) run.
# e2e/kubecluster's cluster needs them all. A PROGRAM named with .exe is built
# for Windows (GOOS=windows): kube-proxy.exe, which e2e's Windows node runs
# under Wine against the simulated HNS.
#
# A cold kube-apiserver takes 6 to 8 minutes and about 2 GB of memory on 2
# cores; each other program adds a few minutes, so each is built once: a stamp
# file per program in DIR records a hash of go.mod, go.sum and this script, a
# current program costs a few file reads, and bumping the pinned version (or
# changing this script) rebuilds. The builds run under nice, and GOFLAGS=-p=1
# from the caller keeps them to one package at a time on a busy machine.
set -eu

if [ $# -lt 1 ]; then
	echo "usage: $0 DIR [PROGRAM...]" >&2
	exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$1"
shift
[ $# -gt 0 ] || set -- kube-apiserver

# Without the version stamped in, each program reports v0.0.0-master (on
# /version, in the kubelet's node status, in kubectl version); Kubernetes' own
# build sets these from git, which a module download has not.
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
vpkg=k8s.io/component-base/version
ldflags="-s -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

# The programs out of date are built by one go build, which compiles the
# packages they share once and keeps both cores busy while each links; agnhost,
# with a version of its own, by another.
stale=""
stale_pkgs=""
windows=""
for prog in "$@"; do
	pkg=$(sed -n "s|^[[:space:]]*\(k8s.io/kubernetes/.*/${prog%.exe}\)\$|\1|p" "$here/go.mod")
	if [ -z "$pkg" ]; then
		echo "install-kube: $prog is not a tool of $here/go.mod" >&2
		exit 2
	fi
	if tool_current ".weft-$prog-stamp" "$here/go.mod" "$here/go.sum" "$here/install-kube.sh" &&
		[ -x "$dir/$prog" ]; then
		continue
	fi
	if [ "$prog" = agnhost ]; then
		build_agnhost=$pkg
		continue
	fi
	if [ "$prog" != "${prog%.exe}" ]; then
		windows="$windows $prog"
		continue
	fi
	stale="$stale $prog"
	stale_pkgs="$stale_pkgs $pkg"
done

# install PROG...: moves each built program from the temporary directory into
# place and stamps it. Binaries go to a temporary directory first so that an
# interrupted build never leaves a truncated program next to a stale stamp.
tmp="$dir/.build.tmp"
install_built() {
	for p in "$@"; do
		mv -f "$tmp/$p" "$dir/$p"
		tool_current ".weft-$p-stamp" "$here/go.mod" "$here/go.sum" "$here/install-kube.sh" || true
		echo "$want" >"$stamp"
	done
}

if [ -n "$stale" ]; then
	echo "install-kube: building$stale $version into $dir (minutes, once)"
	start=$(date +%s)
	rm -rf "$tmp" && mkdir -p "$tmp"
	# -mod=readonly keeps a stale go.sum from being rewritten behind our back.
	# shellcheck disable=SC2086 # one word per package
	(cd "$here" && CGO_ENABLED=0 nice go build -mod=readonly -trimpath -ldflags="$ldflags" \
		-o "$tmp/" $stale_pkgs)
	# shellcheck disable=SC2086
	install_built $stale
	echo "install-kube:$stale built in $(($(date +%s) - start)) s"
fi
for prog in $windows; do
	echo "install-kube: building $prog $version for Windows into $dir (minutes, once)"
	start=$(date +%s)
	pkg=$(sed -n "s|^[[:space:]]*\(k8s.io/kubernetes/.*/${prog%.exe}\)\$|\1|p" "$here/go.mod")
	rm -rf "$tmp" && mkdir -p "$tmp"
	(cd "$here" && GOOS=windows GOARCH=amd64 CGO_ENABLED=0 nice go build -mod=readonly -trimpath \
		-ldflags="$ldflags" -o "$tmp/$prog" "$pkg")
	install_built "$prog"
	echo "install-kube: $prog built in $(($(date +%s) - start)) s"
done
if [ -n "${build_agnhost:-}" ]; then
	echo "install-kube: building agnhost into $dir (minutes, once)"
	start=$(date +%s)
	# agnhost has a version of its own, which its image is tagged with
	# (test/images/agnhost/VERSION; its Makefile sets main.Version so).
	src=$(cd "$here" && go mod download k8s.io/kubernetes &&
		go list -mod=readonly -m -f '{{.Dir}}' k8s.io/kubernetes)
	rm -rf "$tmp" && mkdir -p "$tmp"
	(cd "$here" && CGO_ENABLED=0 nice go build -mod=readonly -trimpath \
		-ldflags="-s -X main.Version=$(cat "$src/test/images/agnhost/VERSION")" -o "$tmp/" "$build_agnhost")
	install_built agnhost
	echo "install-kube: agnhost built in $(($(date +%s) - start)) s"
fi
rm -rf "$tmp"
