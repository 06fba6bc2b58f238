#!/bin/sh
# install-e2e-deps.sh: install the Debian packages the e2e tests and the demo
# run inside network namespaces (ping from iputils, ip and bridge from
# iproute2), and runc, the OCI runtime the image test (dist, TestImageInRunc)
# runs weft's image with; and the programs e2e/kubecluster's test images are
# made of (E2EImages): busybox-static, and the tools the Kubernetes e2e tests
# run in agnhost's pods (curl, OpenBSD's nc, dig, wget). Does nothing when
# they are all present, so it is cheap to call before every run; needs root
# only when something is missing.
set -eu

missing=""
command -v ping >/dev/null 2>&1 || missing="$missing iputils-ping"
if ! command -v ip >/dev/null 2>&1 || ! command -v bridge >/dev/null 2>&1; then
	missing="$missing iproute2"
fi
# nft only lets the masquerade tests compare the kernel's view with weft's; they skip without it.
command -v nft >/dev/null 2>&1 || missing="$missing nftables"
command -v runc >/dev/null 2>&1 || missing="$missing runc"
command -v curl >/dev/null 2>&1 || missing="$missing curl"
command -v nc.openbsd >/dev/null 2>&1 || missing="$missing netcat-openbsd"
command -v dig >/dev/null 2>&1 || missing="$missing bind9-dnsutils"
command -v wget >/dev/null 2>&1 || missing="$missing wget"
# Debian's busybox package is linked dynamically; the images need the static one.
[ "$(dpkg-query -W -f '${db:Status-Status}' busybox-static 2>/dev/null)" = installed ] ||
	missing="$missing busybox-static"
# busybox and inetutils also ship a ping, but their summary line and flags
# differ from the iputils one the harness parses.
if command -v ping >/dev/null 2>&1 && ! ping -V 2>&1 | grep -q iputils; then
	missing="$missing iputils-ping"
fi

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-e2e-deps: missing$missing; run as root to install them" >&2
	exit 1
fi
echo "install-e2e-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # one word per package
apt-get install -y -qq $missing >/dev/null
