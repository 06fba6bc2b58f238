#!/bin/sh
# install-helm.sh DIR: build helm, at the version pinned in this module's go.mod, into
# DIR/helm, for the tests of the chart dist/helm/weft (helm lint, helm template).
#
# Idempotent and fast when nothing changed: a stamp file in DIR records a hash of go.mod,
# go.sum and this script, so a cached DIR costs a few file reads, and bumping the pinned
# version rebuilds. A cold build takes 3 to 5 minutes on two cores.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
. "$here/../install-lib.sh"
tool_dir "$@"
if tool_current .weft-helm-stamp "$here/go.mod" "$here/go.sum" "$0" && [ -x "$dir/helm" ]; then
	exit 0
fi

version=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' helm.sh/helm/v3)
# Stamped as Helm's own Makefile does: its version, and the Kubernetes version that
# `helm template` and `helm lint` assume without a cluster (.Capabilities.KubeVersion, the
# deprecation rules), which Helm derives from its client-go: v0.37 is Kubernetes 1.37.
# Without them helm says v3.22 and assumes Kubernetes 1.20.
kube=$(cd "$here" && go list -mod=readonly -m -f '{{.Version}}' k8s.io/client-go)
minor=$(echo "$kube" | cut -d. -f2)
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags="$ldflags -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$minor"
done

echo "install-helm: building helm $version into $dir"
# GOFLAGS from a caller (the Makefile exports -buildvcs=false) apply here too; -mod=readonly
# keeps a stale go.sum from being rewritten behind our back. The binary is built beside its
# final name and renamed, so that an interrupted build never leaves a half-written helm that
# the stamp check would take for installed.
rm -f "$stamp"
(cd "$here" && CGO_ENABLED=0 go build -mod=readonly -trimpath -ldflags "$ldflags" \
	-o "$dir/helm.tmp" helm.sh/helm/v3/cmd/helm)
mv -f "$dir/helm.tmp" "$dir/helm"

if ! "$dir/helm" version --short | grep -q "^$version"; then
	echo "install-helm: $dir/helm version does not say $version" >&2
	exit 1
fi
echo "$want" >"$stamp"
