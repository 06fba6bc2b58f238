package kubecluster

import (
	"os"
	"path/filepath"
	"testing"
)

// pingImageArchive builds an image of Debian's busybox-static for the ping pods, and returns
// its archive and name. Stand-in until the e2e images (busybox, agnhost) are in.
func pingImageArchive(t *testing.T, work string) (string, string) {
	t.Helper()
	const ref = "weft.local/busybox:e2e"
	files := []imageFile{{Path: "/bin/busybox", Src: "/bin/busybox", Mode: 0o755}, {Path: "/tmp", Mode: os.ModeDir | os.ModeSticky | 0o777}}
	for _, p := range []string{"sh", "ping", "sleep", "cat", "kill", "readlink", "ls"} {
		files = append(files, imageFile{Path: "/bin/" + p, Link: "busybox"})
	}
	img, err := hostFilesImage(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(work, "busybox.tar")
	if err := writeArchive(out, ref, img); err != nil {
		t.Fatal(err)
	}
	return out, ref
}
