#!/bin/sh
# install-deps.sh: install the Debian packages flanneld needs at run time in the e2e tests.
# Does nothing when they are present, so it is cheap to call before every run; needs root
# only when something is missing.
#
# flanneld (v0.28) runs iptables and ip6tables whichever rule backend the network config
# picks. In iptables mode (the default) it runs without them, but logs an error at every
# resync of its FORWARD rules and has no masquerade; in nftables mode (EnableNFTables) it
# first cleans up the iptables rules of an earlier run and exits at start without them
# ("failed to setup IPTables. iptables binary was not found"). nft (nftables mode, and the
# clean-up of nftables rules in iptables mode, which does without it) is installed by
# ../install-e2e-deps.sh already.
set -eu

missing=""
if ! command -v iptables >/dev/null 2>&1 || ! command -v ip6tables >/dev/null 2>&1; then
	missing="$missing iptables"
fi

[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
	echo "install-flannel-deps: missing$missing; run as root to install them" >&2
	exit 1
fi
echo "install-flannel-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# shellcheck disable=SC2086 # one word per package
apt-get install -y -qq $missing >/dev/null
