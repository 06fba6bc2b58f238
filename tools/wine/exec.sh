#!/bin/sh
# exec.sh: the `go test -exec` wrapper that runs a Windows test binary under Wine, in the
# prefix setup.sh made. Give its absolute path: go runs it from each package's directory.
#   GOOS=windows go test -exec "$PWD/tools/wine/exec.sh" ./windows/...
here=$(cd "$(dirname "$0")" && pwd)
: "${WINEPREFIX:=$(cd "$here/../.." && pwd)/.cache/wine}"
# Our computenetwork.dll and vmcompute.dll (setup.sh builds them into the prefix), not any
# builtin a later Wine may bring, and our iphlpapi.dll, not Wine's builtin.
export WINEPREFIX WINEDEBUG=-all WINEDLLOVERRIDES="computenetwork,vmcompute,iphlpapi=n"
exec /usr/lib/wine/wine64 "$@"
