package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWritePermIgnoresUmask checks that perm is applied exactly even when the
// umask would strip bits from it. It changes the process umask, so it must
// not run in parallel with other tests.
func TestWritePermIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	path := filepath.Join(t.TempDir(), "sub", "subnet.env")
	if err := Write(path, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != 0o644 {
		t.Fatalf("mode under umask 077 = %v, want %v", got, os.FileMode(0o644))
	}
}
