#!/bin/sh
# install-prometheus.sh: install Debian's prometheus package, which ships both
# the server (/usr/bin/prometheus) and promtool. The metrics tests use them:
# promtool checks weftd's exposition format, and a real server scrapes a weftd
# of the e2e cluster. Does nothing when both are present, so it is cheap to
# call before every run; needs root only when something is missing.
#
# The package's own service is stopped and disabled where systemd runs: the
# tests start their own servers, and a stray one would only take port 9090.
set -eu

if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "install-prometheus: prometheus or promtool missing; run as root to install the prometheus package" >&2
	exit 1
fi
echo "install-prometheus: installing prometheus"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# --no-install-recommends: the recommended exporters and web assets are not needed.
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
	systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
for b in prometheus promtool; do
	if ! command -v "$b" >/dev/null 2>&1; then
		echo "install-prometheus: $b missing after installing the prometheus package" >&2
		exit 1
	fi
done
