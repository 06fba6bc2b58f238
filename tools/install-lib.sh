# install-lib.sh: what the install scripts of tools/ share, for them to source. Each builds
# tools pinned in a go.mod into a directory DIR, once: a stamp file in DIR records a hash
# of the files the build depends on, so that a current DIR costs a few file reads.
# shellcheck shell=sh

# tool_dir "$@": the scripts' one argument, DIR, which it makes; $dir is its absolute path.
tool_dir() {
	if [ $# -ne 1 ]; then
		echo "usage: $0 DIR" >&2
		exit 2
	fi
	mkdir -p "$1"
	dir=$(cd "$1" && pwd)
}

# tool_current STAMP FILE...: sets $stamp to DIR/STAMP and $want to the hash of FILEs, and
# succeeds when the stamp holds that hash: what is in DIR was built from these files.
tool_current() {
	stamp="$dir/$1"
	shift
	want=$(cat "$@" | sha256sum | cut -d' ' -f1)
	[ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]
}
