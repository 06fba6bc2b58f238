#!/bin/sh
# install-e2e.sh DIR: build e2e.test, Kubernetes' end-to-end suite (the test binary of
# k8s.io/kubernetes/test/e2e), into DIR at the version of k8s.io/kubernetes pinned in this
# module's go.mod: `make deps` builds it for `make test`, whose TestPodNetwork runs a core of
# its network specs against e2e/kubecluster's cluster, and `make conformance` runs many more
# (TestConformance, TestNetworkPolicyConformance).
#
# The suite links nearly all of Kubernetes and every e2e test: measured here, about 18 minutes
# on a busy machine with Go's cache warm from the cluster's programs (install-kube.sh), 2.2 GB
# of memory to link (30 s), a 110 MB binary. Built once: a stamp in DIR records a hash of go.mod, go.sum and this
# script. The build runs under nice; GOFLAGS=-p=1 from the caller keeps it to one package at
# a time on a busy machine.
#
# go.sum holds the sums of the modules only e2e.test links (k8s.io/sample-apiserver, which
# test/e2e/apimachinery imports): `go mod tidy` would drop them, since it never looks at a
# dependency's test imports, and requiring them in go.mod would let sample-apiserver v0.36.4's
# own requirements raise golang.org/x/* and k8s.io/api under every program of this module.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"

if tool_current .weft-e2e.test-stamp "$here/go.mod" "$here/go.sum" "$here/install-e2e.sh" &&
	[ -x "$dir/e2e.test" ]; then
	exit 0
fi

# Stamped as install-kube.sh stamps the programs: the suite logs its version beside the API
# server's, and an unstamped one says v0.0.0-master.
version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/kubernetes)
minor=$(echo "$version" | cut -d. -f2)
vpkg=k8s.io/component-base/version
ldflags="-s -X $vpkg.gitVersion=$version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$minor -X $vpkg.gitTreeState=clean"

echo "install-e2e: building e2e.test $version into $dir (many minutes, once)"
start=$(date +%s)
rm -f "$stamp"
# -mod=readonly keeps a stale go.sum from being rewritten behind our back; the binary is
# renamed into place so that an interrupted build leaves nothing the stamp check could take.
# -vet=off: go test -c would vet the suite, which needs vet's facts of every package it
# imports, nearly as much work again as the build.
(cd "$here" && CGO_ENABLED=0 nice go test -c -vet=off -mod=readonly -trimpath -ldflags="$ldflags" \
	-o "$dir/e2e.test.tmp" k8s.io/kubernetes/test/e2e)
mv -f "$dir/e2e.test.tmp" "$dir/e2e.test"
echo "$want" >"$stamp"
echo "install-e2e: e2e.test built in $(($(date +%s) - start)) s"
