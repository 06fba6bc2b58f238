#!/bin/sh
# setup.sh: make Windows test binaries runnable here under Wine. Installs Debian's wine64 and
# the mingw-w64 cross compiler (apt-get, root only, only when missing), creates a Wine prefix
# (default .cache/wine in the repository, or $WINEPREFIX) and builds into it the
# bcryptprimitives.dll shim that Go 1.22+ binaries need (Wine 8 has no ProcessPrng), the
# simulated HNS DLLs and the simulated host's iphlpapi.dll.
# Cheap when everything is in place, so it can run before every test run. Prints nothing
# on success; exec.sh is then the `go test -exec` wrapper.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
: "${WINEPREFIX:=$repo/.cache/wine}"
export WINEPREFIX WINEDEBUG=-all
# Test packages that need Wine may run this at once (go test runs packages in parallel):
# one at a time, so that a fresh machine installs and boots the prefix once.
mkdir -p "$(dirname "$WINEPREFIX")"
exec 9>"$WINEPREFIX.lock"
flock 9
wine=/usr/lib/wine/wine64 # Debian ships no /usr/bin/wine for wine64 alone
cc=x86_64-w64-mingw32-gcc

missing=""
[ -x "$wine" ] || missing="$missing wine64"
command -v "$cc" >/dev/null 2>&1 || missing="$missing gcc-mingw-w64-x86-64-win32"
if [ -n "$missing" ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "wine/setup.sh: missing$missing; run as root to install them" >&2
		exit 1
	fi
	echo "wine/setup.sh: installing$missing" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# shellcheck disable=SC2086 # one word per package
	apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ ! -f "$WINEPREFIX/system.reg" ]; then
	mkdir -p "$WINEPREFIX"
	# wineboot wants a display for its dialogs; without one it still builds the prefix.
	DISPLAY='' "$wine" wineboot --init >/dev/null 2>&1 || true
	/usr/lib/wine/wineserver -w 2>/dev/null || true
	if [ ! -f "$WINEPREFIX/system.reg" ]; then
		echo "wine/setup.sh: wineboot did not create a prefix in $WINEPREFIX" >&2
		exit 1
	fi
fi

dll="$WINEPREFIX/drive_c/windows/system32/bcryptprimitives.dll"
if [ ! -f "$dll" ] || [ "$here/processprng.c" -nt "$dll" ]; then
	"$cc" -shared -O2 -s -o "$dll" "$here/processprng.c" -ladvapi32
fi

# The simulated HNS DLLs (tools/wine/hns): computenetwork.dll and vmcompute.dll, which hand
# hcsshim's calls to the simulated HNS service (internal/hnssim). Wine has no builtin of either
# name; WINEDLLOVERRIDES=computenetwork,vmcompute=n is set by whoever runs them anyway.
for name in computenetwork vmcompute; do
	out="$WINEPREFIX/drive_c/windows/system32/$name.dll"
	if [ ! -f "$out" ] || [ "$here/hns/$name.c" -nt "$out" ] || [ "$here/hns/call.h" -nt "$out" ]; then
		"$cc" -shared -O2 -s -Wall -o "$out" "$here/hns/$name.c" -lws2_32 -lole32
	fi
done

# iphlpapi.dll (tools/wine/iphlpapi): weftd's IP Helper calls, on the simulated host of the
# simulated HNS service; every other export forwards to Wine's own iphlpapi, copied beside it
# as iphlpwine.dll (a copy of a builtin loads under its new name). It replaces the prefix's
# copy of the builtin, which Wine loads only with WINEDLLOVERRIDES=iphlpapi=n (exec.sh sets
# it); without, Wine keeps its builtin. It is rebuilt when missing, older than its source, or
# overwritten by a prefix update (no WeftSimulatedHost in it).
sys32="$WINEPREFIX/drive_c/windows/system32"
out="$sys32/iphlpapi.dll"
src="$here/iphlpapi/iphlpapi.c"
if [ ! -f "$out" ] || [ "$src" -nt "$out" ] || [ "$here/hns/call.h" -nt "$out" ] || ! grep -q WeftSimulatedHost "$out"; then
	wine_dll=$(dirname "$(readlink -f "$wine")")
	builtin=$(find "$wine_dll/.." /usr/lib/x86_64-linux-gnu/wine /usr/lib/wine -path '*x86_64-windows/iphlpapi.dll' 2>/dev/null | head -n 1)
	if [ -z "$builtin" ]; then
		echo "wine/setup.sh: Wine's builtin iphlpapi.dll not found" >&2
		exit 1
	fi
	cp "$builtin" "$sys32/iphlpwine.dll"
	def=$(mktemp --suffix=.def)
	trap 'rm -f "$def"' EXIT
	own=$(sed -n 's/^EXPORT [A-Za-z_]* WINAPI \([A-Za-z0-9]*\)(.*/\1/p' "$src")
	{
		echo "EXPORTS"
		x86_64-w64-mingw32-objdump -p "$builtin" | sed -n '/\[Ordinal\/Name Pointer\] Table/,/^$/s/^\t\[ *[0-9]*\] //p' |
			grep -vxF "$own" | sed 's/.*/  & = iphlpwine.&/'
	} >"$def"
	"$cc" -shared -O2 -s -Wall -o "$out" "$src" "$def" -lws2_32 -lole32
fi
