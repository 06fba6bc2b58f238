// Package winetest gives tests the Wine that tools/wine/setup.sh installs, with the simulated
// HNS DLLs in its prefix: a check that it is there, and prefixes of a test's own made from it.
package winetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// Wine64 is Debian's Wine loader (there is no /usr/bin/wine).
const Wine64 = "/usr/lib/wine/wine64"

// wineserver is the server of a prefix's Wine processes.
const wineserver = "/usr/lib/wine/wineserver"

// Need runs the repository's tools/wine/setup.sh, which installs Wine and makes its prefix
// when they are missing, and skips the test when that fails (it installs as root only).
func Need(tb testing.TB, repo string) {
	tb.Helper()
	if out, err := exec.Command(filepath.Join(repo, "tools", "wine", "setup.sh")).CombinedOutput(); err != nil {
		tb.Skipf("Wine is not set up (tools/wine/setup.sh installs it as root): %v\n%s", err, out)
	}
}

// Prefix makes a Wine prefix of the test's own, named from pattern as os.MkdirTemp names,
// from the one setup.sh made in the repository's .cache/wine: its processes get a
// wineserver of their own (which makes their sockets, so it must start in their network
// namespace), and what they write in the registry stays theirs while other tests copy the
// prefix. drive_c is hard-linked, not copied (700 MB), so the prefix is made next to the
// source, on the same file system. When the test ends its wineserver is stopped and it is
// removed.
func Prefix(tb testing.TB, repo, pattern string) string {
	tb.Helper()
	src := filepath.Join(repo, ".cache", "wine")
	dst, err := os.MkdirTemp(filepath.Join(repo, ".cache"), pattern)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		kill := exec.Command(wineserver, "-k")
		kill.Env = append(os.Environ(), "WINEPREFIX="+dst)
		_ = kill.Run() // none may run
		_ = os.RemoveAll(dst)
	})
	for _, args := range [][]string{
		{"cp", "-al", filepath.Join(src, "drive_c"), dst},
		{"cp", "-a", filepath.Join(src, "dosdevices"), dst},
		// .update-timestamp too: without it Wine updates the prefix first (wineboot, ~12 s).
		{"sh", "-c", "cp -p " + src + "/*.reg " + src + "/.update-timestamp " + dst},
	} {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			tb.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	return dst
}
