#!/bin/sh
# install-flanneld.sh DIR: build flanneld, at the version pinned in this module's go.mod,
# into DIR/flanneld, for the e2e tests that run a real flanneld beside weftd nodes. With
# GOOS=windows it builds DIR/flanneld.exe instead (GOARCH amd64 unless set, no cgo: flannel's
# Windows build needs none), the daemon the Wine node of the e2e tests runs beside weftd.exe.
#
# Built as upstream's release is (flannel's Makefile: -ldflags '-s -w -X …version.Version=…
# -extldflags "-static"', cgo on amd64): without symbol tables, and on Linux linked
# statically, as weftd's image build is; the benchmarks that set the two side by side compare
# like with like.
#
# Idempotent and fast when nothing changed: a stamp file in DIR (one per GOOS) records a
# hash of go.mod, go.sum and this script, so a cached DIR costs a few file reads, and bumping
# the pinned version or changing the build rebuilds. A cold build takes a few minutes on two cores (client-go, hcsshim,
# etcd's client...).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"
goos=$(go env GOOS)
bin=flanneld stampname=.weft-flannel-stamp
if [ "$goos" = windows ]; then
	bin=flanneld.exe stampname=.weft-flannel-windows-stamp
	GOARCH=${GOARCH:-amd64}
	export GOARCH
fi
if tool_current "$stampname" "$here/go.mod" "$here/go.sum" "$here/install-flanneld.sh" && [ -f "$dir/$bin" ]; then
	exit 0
fi

# Not `go install github.com/flannel-io/flannel@VERSION`: the module proxy refuses two of the
# Tencent SDK versions flannel's go.mod asks for, which only this module's go.mod can move
# (see the comments there), and `go install pkg@version` ignores any module but flannel's.
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' github.com/flannel-io/flannel)

# On Linux amd64 flannel's udp backend exists only with cgo (its packet pump is C; without
# cgo the package does not compile), so flanneld needs a C compiler there, as upstream's own
# amd64 build does. Other architectures, and Windows (no udp backend), build without cgo.
cgo=0
if [ "$goos" = linux ] && [ "$(go env GOARCH)" = amd64 ]; then
	cgo=1
	cc=$(go env CC)
	if ! command -v "${cc:-gcc}" >/dev/null 2>&1; then
		echo "install-flanneld: flanneld on amd64 needs cgo, and there is no C compiler (${cc:-gcc}); apt-get install gcc" >&2
		exit 1
	fi
fi

echo "install-flanneld: building $bin $version ($goos) into $dir (cgo $cgo)"
# GOFLAGS from a caller (the Makefile exports -buildvcs=false) apply here too; -mod=readonly
# keeps a stale go.sum from being rewritten behind our back. The version is stamped as
# upstream's Makefile does, so that flanneld --version and its log say which one runs. The
# binary is built beside its final name and renamed, so that an interrupted build never
# leaves a half-written flanneld that the stamp check would take for installed.
ldflags="-s -w -X github.com/flannel-io/flannel/pkg/version.Version=$version"
if [ "$goos" = linux ]; then
	ldflags="$ldflags -extldflags -static"
fi
(cd "$here" && CGO_ENABLED=$cgo go build -mod=readonly -trimpath -ldflags "$ldflags" \
	-o "$dir/$bin.tmp" github.com/flannel-io/flannel)
mv -f "$dir/$bin.tmp" "$dir/$bin"

# A Windows binary cannot run here to say its version; its build information says which
# module version it was built from (-trimpath leaves the -X flag out of it).
if [ "$goos" = windows ]; then
	if ! go version -m "$dir/$bin" | grep -qE "^[[:space:]]mod[[:space:]]github.com/flannel-io/flannel[[:space:]]$version[[:space:]]"; then
		echo "install-flanneld: $dir/$bin is not built from flannel $version (go version -m)" >&2
		exit 1
	fi
elif [ "$("$dir/$bin" --version 2>&1)" != "$version" ]; then
	echo "install-flanneld: $dir/$bin --version does not say $version" >&2
	exit 1
fi
echo "$want" >"$stamp"
